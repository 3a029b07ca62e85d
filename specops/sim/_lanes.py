"""A decoding request's lane: what each of its decode steps emits, for one k, walked once.

With k drafts a step emits ``min(trace[pos % len], k + 1)`` and moves ``pos`` on by as
many (the replay rule, specops.sim._workload). Nothing else changes what a request emits,
so its whole sequence of steps can be walked once when k is known and read in bulk for as
many steps as a stretch needs, instead of being looked up again at every step. A
calibration row's trace is shared by every request drawn from the row, so its walk from
the start is shared too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Lane", "walk_lane"]

Tokens = npt.NDArray[np.int64]

# (id(trace), cap) -> (the trace, kept so the id stays its own; its walk from position 0)
_SHARED: dict[tuple[int, int], tuple[npt.NDArray[np.int32], Tokens]] = {}


@dataclass(slots=True)
class Lane:
    """One request's decode steps from an origin (its state when walked) to its finish.

    ``cum[j]``: tokens past the origin after j decode steps (trace positions and, but for
    the last step, generated tokens alike); ``steps``: the decode steps to the finish, the
    first j with ``cum[j] >= remaining``; ``done``: decode steps taken since the origin.
    """

    cap: int
    cum: Tokens
    steps: int
    remaining: int
    pos: int
    generated: int
    context: int
    done: int = 0

    def fits(self, cap: int, pos: int, generated: int) -> bool:
        """Whether this lane is the walk of a request now at ``pos``/``generated``."""
        return self.cap == cap and self.pos == pos and self.generated == generated

    def resumed(self, done: int) -> Lane | None:
        """The lane after a preemption ``done`` decode steps in, once the recomputed prefill
        has given the next token (None: that token finishes the request). The trace walk
        goes on from where it stopped."""
        moved = int(self.cum[done])
        remaining = self.remaining - moved - 1
        if remaining <= 0:
            return None
        cum = self.cum[done:] - moved
        steps = int(np.searchsorted(cum, remaining))
        return Lane(
            self.cap,
            cum,
            steps,
            remaining,
            self.pos + moved,
            self.generated + moved + 1,
            self.context + moved + 1,
        )


def _walk(trace: Sequence[int], pos: int, cap: int, remaining: int) -> Tokens:
    length = len(trace)
    cum = [0]
    total = 0
    while total < remaining:
        tokens = trace[pos % length]
        if tokens > cap:
            tokens = cap
        pos += tokens
        total += tokens
        cum.append(total)
    return np.asarray(cum, dtype=np.int64)


def _shared_walk(trace: npt.NDArray[np.int32], cap: int, remaining: int) -> Tokens:
    key = (id(trace), cap)
    kept = _SHARED.get(key)
    if kept is None or kept[1][-1] < remaining:
        _SHARED[key] = kept = (trace, _walk(trace.tolist(), 0, cap, max(remaining, trace.size)))
    return kept[1]


def walk_lane(
    trace: npt.NDArray[np.int32],
    *,
    shared: bool,
    pos: int,
    generated: int,
    context: int,
    target: int,
    cap: int,
) -> Lane:
    """The lane of a decoding request at ``pos`` with ``generated`` of ``target`` tokens."""
    remaining = target - generated
    if shared and pos == 0:
        cum = _shared_walk(trace, cap, remaining)
    else:
        cum = _walk(trace.tolist(), pos, cap, remaining)
    steps = int(np.searchsorted(cum, remaining))
    return Lane(cap, cum, steps, remaining, pos, generated, context)
