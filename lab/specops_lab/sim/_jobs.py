"""How many processes independent runs of the simulated engine take by default."""

from __future__ import annotations

import os

__all__ = ["default_jobs"]


def default_jobs() -> int:
    """Worker processes for independent runs: two, or fewer on a smaller machine."""
    return min(2, os.cpu_count() or 1)
