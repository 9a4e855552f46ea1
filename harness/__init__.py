"""Harnesses that start real servers for the tests and the benchmarks (not installed)."""
