"""Typed errors of the core. Every message says what was wrong, in which input, and what to do."""

from __future__ import annotations


class UpdateStreamError(Exception):
    """Base of every error UpdateStream raises on purpose (the CLI prints these on one line)."""
