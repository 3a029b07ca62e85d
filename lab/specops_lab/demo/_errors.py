"""The demo's error: a step of the local stack could not be brought up or run."""

from __future__ import annotations

from specops.errors import SpecopsError

__all__ = ["DemoError"]


class DemoError(SpecopsError):
    """A demo step failed; the message says which step and what to look at."""
