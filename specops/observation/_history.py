"""The readings of the last few minutes, kept as snapshots and the intervals between them.

The sidecar keeps one per engine it polls, and the benchmark one per simulated engine, so
both feed :func:`specops.observation.observe` the same way: a reading older than the newest
is dropped, and whatever falls out of the longest window is forgotten.
"""

from __future__ import annotations

from collections import deque

from specops.observation._snapshot import Interval, Snapshot, interval_between

__all__ = ["History"]


class History:
    """Time-ordered snapshots of the last ``keep_s`` seconds and their intervals."""

    def __init__(self, keep_s: float) -> None:
        self._keep_s = keep_s
        self.snapshots: deque[Snapshot] = deque()
        self.intervals: deque[Interval] = deque()

    def add(self, snapshot: Snapshot) -> None:
        if self.snapshots:
            if snapshot.timestamp <= self.snapshots[-1].timestamp:
                return
            self.intervals.append(interval_between(self.snapshots[-1], snapshot))
        self.snapshots.append(snapshot)
        while snapshot.timestamp - self.snapshots[0].timestamp >= self._keep_s:
            self.snapshots.popleft()
            self.intervals.popleft()
