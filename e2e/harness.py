"""Types and helpers of the e2e fixtures, for test modules to import (two conftest.py files
would clash)."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Kubectl", "Phases", "Wait"]

Wait = Callable[[Callable[[], bool], str], None]
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


class Phases:
    """Wall time of named test phases, reported at the end of the session.

    The first run of a phase is reported as cold (first reconcile, caches still empty),
    the later runs as warm.
    """

    def __init__(self) -> None:
        self.runs: dict[str, list[float]] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        self.runs.setdefault(name, []).append(time.monotonic() - started)

    def report(self) -> list[str]:
        lines = [f"{'phase':<44} {'cold s':>7} {'warm s':>7} {'runs':>5}"]
        for name, runs in self.runs.items():
            warm = f"{statistics.median(runs[1:]):7.2f}" if len(runs) > 1 else f"{'-':>7}"
            lines.append(f"{name:<44} {runs[0]:7.2f} {warm} {len(runs):5d}")
        return lines
