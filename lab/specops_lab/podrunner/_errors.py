"""The pod runner's error: a pod it cannot run, or a part of the local stack that failed."""

from __future__ import annotations

from specops.errors import SpecopsError

__all__ = ["PodRunnerError"]


class PodRunnerError(SpecopsError):
    """A pod cannot be translated into local processes, or a runner process failed to start."""
