"""Sinks: cache invalidation, Version Stream change log, CDCv2 files, console."""
