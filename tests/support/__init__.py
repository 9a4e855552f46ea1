"""Helpers that start real components for the integration tests."""
