"""Typed errors of the demo."""

from __future__ import annotations

from updatestream.core.errors import UpdateStreamError


class DemoError(UpdateStreamError):
    """The demo could not run to its verdict: a step failed or timed out (the message says
    which, and where its logs are)."""
