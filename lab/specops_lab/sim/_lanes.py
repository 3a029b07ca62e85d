"""A decoding request's lane: what each of its decode steps emits, for one k, walked once.

With k drafts a step emits ``min(trace[pos % len], k + 1)`` and moves ``pos`` on by as
many (the replay rule, specops_lab.sim._workload). Nothing else changes what a request emits,
so its steps can be walked once when k is known and read in bulk for as many steps as a
stretch needs, instead of being looked up again at every step. A walk goes as far as asked
(a request whose k keeps changing is never walked far ahead of its steps); a calibration
row's trace is shared by every request drawn from the row, so its whole walk from the start
is kept once per k and shared too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Lane", "row_lane", "walk_lane", "walk_lanes"]

Tokens = npt.NDArray[np.int64]

# (id(trace), cap) -> (the trace, kept so the id stays its own; its walk from position 0; the
# decode steps that walk takes to each number of tokens asked for)
_SHARED: dict[tuple[int, int], tuple[npt.NDArray[np.int32], Tokens, dict[int, int]]] = {}
# A walk that must be extended goes at least this many steps further.
_WALK_AHEAD = 64


@dataclass(slots=True)
class Lane:
    """One request's decode steps from an origin (its state when walked) to its finish.

    ``cum[j]``: tokens past the origin after j decode steps (trace positions and, but for
    the last step, generated tokens alike); ``steps``: the decode steps to the finish, the
    first j with ``cum[j] >= remaining``, or, while the walk has not got that far,
    ``len(cum)`` (past what is walked); ``done``: decode steps taken since the origin;
    ``trace``: what the walk goes on from (None once it reaches the finish); ``shared``:
    ``cum`` is a calibration row's walk from the start, the same array for every request
    drawn from the row (so what is derived from it may be kept for the next).
    """

    cap: int
    cum: Tokens
    steps: int
    remaining: int
    pos: int
    generated: int
    context: int
    trace: Sequence[int] | npt.NDArray[np.int32] | None = None
    done: int = 0
    shared: bool = False

    def fits(self, cap: int, pos: int, generated: int) -> bool:
        """Whether this lane is the walk of a request now at ``pos``/``generated``."""
        return self.cap == cap and self.pos == pos and self.generated == generated

    def cover(self, steps: int) -> None:
        """Walk on until ``steps`` decode steps past ``done`` are known, or the finish."""
        if self.trace is None or len(self.cum) - 1 >= self.done + steps:
            return
        start = int(self.cum[-1])
        trace = self.trace.tolist() if isinstance(self.trace, np.ndarray) else self.trace
        self.trace = trace
        more = _walk(
            trace,
            self.pos + start,
            self.cap,
            self.remaining - start,
            self.done + steps + _WALK_AHEAD - (len(self.cum) - 1),
        )
        self.cum = np.concatenate((self.cum, more[1:] + start))
        self._settle()

    def resumed(self, done: int) -> Lane | None:
        """The lane after a preemption ``done`` decode steps in, once the recomputed prefill
        has given the next token (None: that token finishes the request). The trace walk
        goes on from where it stopped."""
        self.cover(done - self.done)
        moved = int(self.cum[done])
        if self.remaining - moved - 1 <= 0:
            return None
        lane = Lane(
            self.cap,
            self.cum[done:] - moved,
            0,
            self.remaining - moved - 1,
            self.pos + moved,
            self.generated + moved + 1,
            self.context + moved + 1,
            self.trace,
        )
        lane._settle()
        return lane

    def _settle(self) -> None:
        if self.cum[-1] >= self.remaining:
            self.steps = int(self.cum.searchsorted(self.remaining))
            self.trace = None
        else:
            self.steps = len(self.cum)


def _walk(trace: Sequence[int], pos: int, cap: int, remaining: int, limit: int) -> Tokens:
    """Tokens past ``pos`` after each of up to ``limit`` steps, until ``remaining``."""
    length = len(trace)
    cum = [0]
    total = 0
    while total < remaining and len(cum) <= limit:
        tokens = trace[pos % length]
        if tokens > cap:
            tokens = cap
        pos += tokens
        total += tokens
        cum.append(total)
    return np.asarray(cum, dtype=np.int64)


def _shared_walk(trace: npt.NDArray[np.int32], cap: int, remaining: int) -> tuple[Tokens, int]:
    """The shared walk of ``trace`` and the decode steps it takes to ``remaining`` tokens
    (many requests drawn from the row ask for the same)."""
    key = (id(trace), cap)
    kept = _SHARED.get(key)
    if kept is None or kept[1][-1] < remaining:
        whole = max(remaining, trace.size)
        _SHARED[key] = kept = (trace, _walk(trace.tolist(), 0, cap, whole, whole + 1), {})
    _, walk, finishes = kept
    steps = finishes.get(remaining)
    if steps is None:
        steps = finishes[remaining] = int(walk.searchsorted(remaining))
    return walk, steps


def walk_lane(
    trace: npt.NDArray[np.int32],
    *,
    shared: bool,
    pos: int,
    generated: int,
    context: int,
    target: int,
    cap: int,
    steps: int,
) -> Lane:
    """The lane of a decoding request at ``pos`` with ``generated`` of ``target`` tokens,
    walked at least ``steps`` decode steps ahead (a shared trace's: to the finish, where
    ``row_lane`` finds it)."""
    if shared:
        lane = row_lane(
            trace, pos=pos, generated=generated, context=context, target=target, cap=cap
        )
        if lane is not None:
            return lane
    remaining = target - generated
    values = trace.tolist()
    cum = _walk(values, pos, cap, remaining, steps + _WALK_AHEAD)
    lane = Lane(cap, cum, 0, remaining, pos, generated, context, values)
    lane._settle()
    return lane


def row_lane(
    trace: npt.NDArray[np.int32], *, pos: int, generated: int, context: int, target: int, cap: int
) -> Lane | None:
    """The lane of a request drawn from a calibration row (its trace shared), from the row's
    walk: the walk itself at ``pos`` 0, else the rest of it from ``pos`` (a walk goes on
    from a position alike however it got there); None where ``pos`` is off the walk (the
    request's k changed on the way)."""
    remaining = target - generated
    cum, finish = _shared_walk(trace, cap, pos + remaining)
    if pos == 0:
        return Lane(cap, cum, finish, remaining, pos, generated, context, shared=True)
    at = int(cum.searchsorted(pos))
    if cum[at] != pos:
        return None
    return Lane(cap, cum[at:] - pos, finish - at, remaining, pos, generated, context)


def walk_lanes(
    traces: npt.NDArray[np.int16],
    lengths: npt.NDArray[np.int64],
    *,
    pos: npt.NDArray[np.int64],
    generated: npt.NDArray[np.int64],
    context: npt.NDArray[np.int64],
    target: npt.NDArray[np.int64],
    cap: int,
    steps: int,
    originals: Sequence[npt.NDArray[np.int32]],
) -> list[Lane]:
    """The lanes of many decoding requests at once, ``steps`` decode steps ahead: row i of
    ``traces`` (its first ``lengths[i]`` entries) is request i's trace (``originals[i]``,
    which a lane walks on from if it must go further)."""
    count = pos.size
    ahead = steps + _WALK_AHEAD
    cum = np.zeros((ahead + 1, count), dtype=np.int64)
    rows = np.arange(count)
    at = pos.copy()
    for step in range(ahead):
        tokens = np.minimum(traces[rows, at % lengths], cap)
        at += tokens
        np.add(cum[step], tokens, out=cum[step + 1])
    remaining = target - generated
    lanes = []
    for i in range(count):
        column = cum[:, i]
        known = int(np.searchsorted(column, remaining[i])) + 1
        lane = Lane(
            cap,
            column[:known].copy(),
            0,
            int(remaining[i]),
            int(pos[i]),
            int(generated[i]),
            int(context[i]),
            originals[i],
        )
        lane._settle()
        lanes.append(lane)
    return lanes
