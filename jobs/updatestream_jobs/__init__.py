"""Spark structured-streaming jobs: the binlog source, the sinks and the job entry point."""
