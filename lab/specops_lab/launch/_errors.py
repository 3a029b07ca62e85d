"""The launch's error: a part (chart, operator, pod runner) would not come up."""

from __future__ import annotations

from specops.errors import SpecopsError

__all__ = ["LaunchError"]


class LaunchError(SpecopsError):
    """A part of the local stack failed to install or start; the message names it and its log."""
