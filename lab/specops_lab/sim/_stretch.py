"""Stretches: many engine steps planned and priced at once, as stepping would run them.

Between the steps that need the whole scheduler (a chunked prefill, a change of k, a step
that opens with a preemption) consecutive steps differ only in who is in the batch:
requests finish, arrive (a closed loop's replacements), are admitted as far as slots, the
token budget and the KV cache allow, and are preempted when the running ones outgrow the
cache. A stretch plans them request by request: each decoding request's tokens come from
its lane (specops_lab.sim._lanes), so only those events are visited one at a time. Every
per-step figure (batch, context, tokens, KV blocks, accepted drafts) is then summed over the
lanes with numpy, the step times come from the truth's formula over arrays, and the stretch
ends at the first step that stepping would run differently or that starts at or after the
time asked for.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, cast, overload

import numpy as np
import numpy.typing as npt

from specops.profiles import DraftFamily
from specops_lab.sim._lanes import Lane
from specops_lab.sim._noise import StepNoise
from specops_lab.sim._truth import EngineSteps, EngineTruth

__all__ = [
    "ADMITTED",
    "ARRIVED",
    "FINISHED",
    "PREEMPTED",
    "Entrant",
    "LaneSteps",
    "Limits",
    "Plan",
    "Pricing",
    "Requests",
    "Stretch",
    "plan",
    "price",
]

Counts = npt.NDArray[np.int64]
Times = npt.NDArray[np.float64]

# What happens to a request in a planned step (Plan.log).
PREEMPTED, ADMITTED, FINISHED, ARRIVED = range(4)

# (id(walk), context, lookahead, block) -> (the shared walk, kept so the id stays its own;
# the KV blocks a request holds after each of its decode steps along it)
_SHARED_BLOCKS: dict[tuple[int, int, int, int], tuple[Counts, Counts]] = {}


@dataclass(frozen=True, slots=True)
class Entrant:
    """A request the stretch admits: its prefill chunk, the prompt tokens its first token
    counts (0 when counted before a preemption) and its lane after that first token (None:
    that token finishes it)."""

    chunk: int
    prompt: int
    lane: Lane | None


class Requests(Protocol):
    """The engine's requests: running ones by admission order, then the queue: waiting
    ones (indices from 0), then a closed loop's next arrivals."""

    def running_lanes(self, cap: int) -> list[Lane]:
        """The running requests' lanes, in admission order, walked for ``cap``."""

    def chunk(self, index: int) -> int:
        """Tokens the prefill of the queued request at ``index`` computes."""

    def entrant(self, index: int, cap: int) -> Entrant:
        """The queued request at ``index``, admitted, its lane walked for ``cap``."""


@dataclass(frozen=True)
class Limits:
    """The scheduler's limits: tokens per step, lookahead slots per request, KV blocks."""

    max_batched_tokens: int
    lookahead: int
    block: int
    kv_blocks: int

    @overload
    def blocks(self, tokens: int, base: int = 0) -> int: ...
    @overload
    def blocks(self, tokens: Counts, base: int = 0) -> Counts: ...
    def blocks(self, tokens: int | Counts, base: int = 0) -> int | Counts:
        """KV blocks a request with ``base + tokens`` of context holds, its lookahead
        included (the scalars summed first, so an array is added to once)."""
        return (tokens + (base + self.lookahead + self.block - 1)) // self.block


@dataclass(frozen=True)
class LaneSteps:
    """Every decode of some lanes in a stretch, flat: the decode's step, its lane, the
    tokens past the lane's origin before and after it, the lane's remaining tokens and its
    context at the origin."""

    lane: Counts
    step: Counts
    low: Counts
    high: Counts
    remaining: Counts
    origin: Counts

    @classmethod
    def of(cls, ids: Counts, lanes: Sequence[Lane], first: Counts, counts: Counts) -> LaneSteps:
        """Lanes ``lanes`` (lane ids ``ids``), each from its ``done`` on: ``counts``
        decodes from step ``first``."""
        if not lanes:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, empty, empty, empty, empty)
        # Each lane's n + 1 known points, one after another: low drops every lane's last,
        # high its first.
        pieces = zip(lanes, counts.tolist(), strict=True)
        cum = np.concatenate([lane.cum[lane.done : lane.done + n + 1] for lane, n in pieces])
        ends = np.cumsum(counts + 1)
        low_keep = np.ones(cum.size, dtype=bool)
        low_keep[ends - 1] = False
        high_keep = np.ones(cum.size, dtype=bool)
        high_keep[ends - counts - 1] = False
        low = cum[low_keep]
        high = cum[high_keep]
        offsets = ends - counts - np.arange(1, len(lanes) + 1)
        return cls(
            lane=np.repeat(ids, counts),
            step=np.arange(low.size) + np.repeat(first - offsets, counts),
            low=low,
            high=high,
            remaining=np.repeat(np.asarray([lane.remaining for lane in lanes]), counts),
            origin=np.repeat(np.asarray([lane.context for lane in lanes]), counts),
        )

    @property
    def context(self) -> Counts:
        return self.origin + self.low

    @property
    def emitted(self) -> Counts:
        """Tokens each decode emits: the trace's, but the last one stops at the target."""
        return np.minimum(self.high, self.remaining) - self.low


@dataclass(frozen=True)
class Plan:
    """What happens in steps ``0 .. steps - 1`` at the level of requests.

    Lanes are the running requests (in admission order), then the admitted ones (in order;
    None: finished by its first token). ``starts``/``finishes``: a lane's first decode step
    and the step at whose end it finishes (maybe past the stretch); ``preempted``: lanes
    preempted at the start of a step (lane id: step), ``resumed`` their lanes once resumed
    (lane id: lane, None where the resuming prefill's token finishes it). ``admitted``:
    (step, entrant) in order; ``log``: (step, what, lane id) of every preemption (at the
    step's start), admission, finish (at its end) and arrival (after it, lane id -1), in the
    order the scheduler does them.
    """

    k: int
    steps: int
    lanes: list[Lane | None]
    starts: list[int]
    finishes: list[int]
    preempted: dict[int, int]
    resumed: dict[int, Lane | None]
    admitted: list[tuple[int, Entrant]]
    log: list[tuple[int, int, int]]

    def all_decodes(self, steps: int) -> LaneSteps:
        """Every decode before ``steps``, lane by lane (the running lanes', then the admitted
        lanes'): a lane decodes from its start to its finish or up to its preemption. Gathered
        afresh for the steps asked, far cheaper than filtering the decodes of more steps."""
        return LaneSteps.of(*self._decoding(steps))

    def blocks_held(self, limits: Limits, steps: int) -> Counts:
        """KV blocks held in each of ``steps`` steps: each decode's context, as
        ``all_decodes`` has it, in blocks and summed by step, with only that gathered."""
        _, lanes, first, counts = self._decoding(steps)
        if not lanes:
            return np.zeros(steps, dtype=np.int64)
        pieces = zip(lanes, counts.tolist(), strict=True)
        low = np.concatenate([lane.cum[lane.done : lane.done + n] for lane, n in pieces])
        origin = np.repeat(np.asarray([lane.context for lane in lanes]), counts)
        offsets = np.cumsum(counts) - counts
        step = np.arange(low.size) + np.repeat(first - offsets, counts)
        held = np.bincount(step, limits.blocks(origin + low), minlength=steps)
        return held.astype(np.int64)

    def _decoding(self, steps: int) -> tuple[Counts, list[Lane], Counts, Counts]:
        """The lanes that decode before ``steps``: their ids, lanes, first decode steps and
        decodes, counted over all lanes at once (a lane finished by its first token, None,
        finishes before it starts)."""
        last = np.asarray(self.finishes, dtype=np.int64) + 1
        if self.preempted:
            lanes = np.fromiter(self.preempted, dtype=np.int64, count=len(self.preempted))
            stops = np.fromiter(self.preempted.values(), dtype=np.int64, count=lanes.size)
            last[lanes] = np.minimum(last[lanes], stops)
        starts = np.asarray(self.starts, dtype=np.int64)
        counts = np.minimum(last, steps) - starts
        ids = np.flatnonzero(counts > 0)
        decoding = [self.lanes[i] for i in ids.tolist()]
        return ids, cast(list[Lane], decoding), starts[ids], counts[ids]


class _Blocks:
    """KV blocks the planned requests hold. While the most that all requests in flight will
    hold (each at its finish) fits the cache, nothing is counted; once it may not, blocks
    are counted step by step, and a step where they outgrow the cache preempts."""

    def __init__(self, limits: Limits, horizon: int) -> None:
        self._limits = limits
        self._horizon = horizon
        self.held: Counts | None = None
        self.most = 0
        self.outgrown = horizon

    def peak(self, lane: Lane | None, chunk: int) -> int:
        """The most a request holds: at its finish (or, finished by its first token, its
        prefill)."""
        return self._limits.blocks(chunk if lane is None else lane.context + lane.remaining)

    def free(self, step: int) -> int | None:
        """Blocks free at ``step`` (None: more than any admission will need)."""
        if self.held is None:
            return None
        return self._limits.kv_blocks - int(self.held[step])

    def over(self, step: int) -> bool:
        return self.held is not None and int(self.held[step]) > self._limits.kv_blocks

    def expect(self, peak: int, planned: Plan) -> None:
        """A request that will hold at most ``peak`` joins: count blocks if it may not fit."""
        self.most += peak
        if self.held is None and self.most > self._limits.kv_blocks:
            self.held = planned.blocks_held(self._limits, self._horizon)
            self.check(0)

    def hold(self, lane: Lane, start: int, count: int, done: int, sign: int = 1) -> None:
        """``lane`` decodes ``count`` steps from ``start`` on, ``done`` decodes past its
        origin then (``sign`` -1: no longer does). ``check`` or ``recheck`` then finds where
        the cache is outgrown, once for all of a step's holds."""
        if self.held is None or count <= 0:
            return
        held = self.held[start : start + count]
        if lane.shared:
            blocks = self._shared_blocks(lane)[done : done + count]
        else:
            blocks = self._limits.blocks(lane.cum[done : done + count], lane.context)
        if sign > 0:
            held += blocks
        else:
            held -= blocks

    def _shared_blocks(self, lane: Lane) -> Counts:
        """The blocks held along a shared walk, kept: many requests drawn from a row enter
        with the same context and walk, and a stretch adds up each one's blocks."""
        limits = self._limits
        key = (id(lane.cum), lane.context, limits.lookahead, limits.block)
        kept = _SHARED_BLOCKS.get(key)
        if kept is None or kept[0] is not lane.cum:
            kept = _SHARED_BLOCKS[key] = (lane.cum, limits.blocks(lane.cum, lane.context))
        return kept[1]

    def recheck(self, start: int) -> None:
        """Where the cache is outgrown, found anew from ``start`` on (blocks were let go)."""
        self.outgrown = self._horizon
        self.check(start)

    def check(self, start: int, count: int | None = None) -> None:
        """Note the first of ``count`` steps (all: None) from ``start`` on that outgrows the
        cache."""
        if self.held is None:
            return
        held = self.held[start : None if count is None else start + count]
        if held.size:
            over = held > self._limits.kv_blocks
            first = int(over.argmax())
            if over[first]:
                self.outgrown = min(self.outgrown, start + first)


class _Planner:
    """The event loop of ``plan``: only the steps where something changes.

    The queue holds the engine's indices (waiting requests, then arrivals) and, pushed to
    its front, requests preempted in the plan (negative: ``-1 - i`` for ``resumed[i]``).
    """

    def __init__(
        self,
        requests: Requests,
        limits: Limits,
        k_for: Callable[[int], int],
        *,
        k: int,
        running: int,
        waiting: int,
        free_slots: int,
        concurrency: int | None,
        horizon: int,
    ) -> None:
        self.requests = requests
        self.limits = limits
        self.k_for = k_for
        self.concurrency = concurrency
        self.horizon = horizon
        self.free_slots = free_slots
        self.in_flight = running
        self.pending: deque[int] = deque(range(waiting))
        self.next_index = waiting
        self.resumed: list[Entrant] = []
        self.entrants: dict[int, Entrant] = {}
        self.blocked = False
        self.k = k
        running_lanes = requests.running_lanes(k + 1)
        lanes: list[Lane | None] = list(running_lanes)
        finishes = [lane.steps - lane.done - 1 for lane in running_lanes]
        self.planned = Plan(k, horizon, lanes, [0] * len(lanes), finishes, {}, {}, [], [])
        self.log = self.planned.log
        self.blocks = _Blocks(limits, horizon)
        # The running lanes as admit adds a lane, all at once (lane ids break ties in the heap).
        context = [lane.context + lane.remaining for lane in running_lanes]
        self.peaks: list[int] = limits.blocks(np.asarray(context, dtype=np.int64)).tolist()
        self.heap = [(finish, i) for i, finish in enumerate(finishes)]
        heapq.heapify(self.heap)
        self.alive = set(range(len(lanes)))
        # Lane ids in admission order (they rise); ids at its tail may have left ``alive``.
        self.admitted_order = list(range(len(lanes)))
        self.blocks.expect(sum(self.peaks), self.planned)

    def _entrant(self, item: int) -> Entrant:
        """The entrant for a queue item, kept while the KV cache keeps it waiting."""
        if item < 0:
            return self.resumed[-1 - item]
        entrant = self.entrants.get(item)
        if entrant is None:
            entrant = self.entrants[item] = self.requests.entrant(item, self.k + 1)
        return entrant

    def preempt(self, step: int) -> None:
        """As the scheduler: while the running requests outgrow the KV cache, the last
        admitted loses its blocks and goes back to the front of the queue."""
        planned = self.planned
        victims = False
        while self.alive and self.blocks.over(step):
            victims = True
            while self.admitted_order[-1] not in self.alive:
                self.admitted_order.pop()
            victim = self.admitted_order[-1]  # the latest admitted still running
            lane = planned.lanes[victim]
            assert lane is not None
            done = step - planned.starts[victim]
            after = min(planned.finishes[victim] + 1, self.horizon) - step
            self.blocks.hold(lane, step, after, lane.done + done, sign=-1)
            planned.preempted[victim] = step
            self.log.append((step, PREEMPTED, victim))
            self.alive.remove(victim)
            self.blocks.most -= self.peaks[victim]
            self.in_flight -= 1
            self.free_slots += 1
            context = lane.context + int(lane.cum[lane.done + done])
            resumed = planned.resumed[victim] = lane.resumed(lane.done + done)
            self.resumed.append(Entrant(context, 0, resumed))
            self.pending.appendleft(-len(self.resumed))
        if victims:
            self.blocks.recheck(step)

    def admit(self, step: int) -> int | None:
        """Admit at ``step`` as the scheduler would; None where it would chunk a prefill."""
        self.blocked = False
        pending = self.pending
        if not pending:  # nothing queued, nothing to admit
            return 0
        limits = self.limits
        blocks = self.blocks
        planned = self.planned
        lanes = planned.lanes
        budget = limits.max_batched_tokens - self.in_flight * limits.lookahead
        taken = needed = longest = 0
        while pending and taken < self.free_slots and budget > 0:
            entrant = self._entrant(pending[0])
            chunk = entrant.chunk
            if chunk > budget:
                return None
            lane = entrant.lane
            peak = blocks.peak(lane, chunk)
            blocks.expect(peak, planned)
            free = blocks.free(step)
            need = limits.blocks(chunk)
            if free is not None and need > free - needed:
                blocks.most -= peak
                self.blocked = True
                break
            pending.popleft()
            budget -= chunk
            needed += need
            taken += 1
            # The lane joins: alive, the latest admitted, in the heap of finishes.
            index = len(lanes)
            finish = step + (lane.steps if lane else 0)
            planned.admitted.append((step, entrant))
            self.log.append((step, ADMITTED, index))
            self.alive.add(index)
            self.admitted_order.append(index)
            heapq.heappush(self.heap, (finish, index))
            lanes.append(lane)
            planned.starts.append(step + 1)
            planned.finishes.append(finish)
            self.peaks.append(peak)
            if lane is not None:
                count = min(finish + 1, self.horizon) - step - 1
                blocks.hold(lane, step + 1, count, lane.done)
                longest = max(longest, count)
        if longest > 0:
            blocks.check(step + 1, longest)
        return taken

    def finish(self, step: int) -> int:
        """Requests that finish at ``step``'s end leave; then the closed loop tops up."""
        ended = 0
        while self.heap and self.heap[0][0] == step:
            lane = heapq.heappop(self.heap)[1]
            if lane in self.alive:
                self.alive.remove(lane)
                self.blocks.most -= self.peaks[lane]
                self.log.append((step, FINISHED, lane))
                ended += 1
        self.in_flight -= ended
        self.free_slots += ended
        if self.concurrency is not None:
            for _ in range(self.concurrency - self.in_flight - len(self.pending)):
                self.pending.append(self.next_index)
                self.next_index += 1
                self.log.append((step, ARRIVED, -1))
        return ended

    def run(self) -> Plan | None:
        step = 0
        end = self.horizon
        # k_for gives the same k for as many scheduled (a settled rule's select only reads
        # its state), and that number seldom changes from one step to the next.
        agreed = -1
        while step < self.horizon:
            if not self.in_flight and not self.pending:  # the engine runs dry: no step
                end = step
                break
            preempts = step >= self.blocks.outgrown
            if preempts:
                self.preempt(step)
            decoding = self.in_flight
            taken = self.admit(step)
            if taken is None:
                end = step
                break
            if decoding and decoding + taken != agreed:
                if self.k_for(decoding + taken) != self.k:
                    end = step
                    break
                agreed = decoding + taken
            self.in_flight += taken
            self.free_slots -= taken
            ended = self.finish(step)
            roomy = self.limits.max_batched_tokens > self.in_flight * self.limits.lookahead
            if (
                ended
                or preempts
                or (self.pending and self.free_slots and roomy and not self.blocked)
            ):
                step += 1
            elif self.heap:  # nothing changes until the next request finishes
                step = min(self.heap[0][0], self.blocks.outgrown)
            else:
                end = step + 1
                break
        if end == 0:
            return None
        return replace(self.planned, steps=min(end, self.horizon))


def plan(
    requests: Requests,
    limits: Limits,
    *,
    running: int,
    held: int,
    waiting: int,
    free_slots: int,
    concurrency: int | None,
    k_for: Callable[[int], int],
    horizon: int,
) -> Plan | None:
    """The stretch's requests; None when its very first step needs the whole scheduler.

    Every running request decodes (none is part way through a chunked prefill) and, all
    together, they hold ``held`` KV blocks now. A step
    admits queued requests in order while slots, the token budget and KV blocks last, each
    prefilled whole (one that would be chunked ends the stretch, as does a step whose
    running requests outgrow the KV cache: a preemption); ``k_for(scheduled)`` is the k of
    a step that decodes, and a step that would get another k than the first ends the
    stretch. With ``concurrency``, after every step the closed loop tops the requests
    in flight (running and queued) up to it.
    """
    if held > limits.kv_blocks:  # the step starts with a preemption: the scheduler's work
        return None
    budget = limits.max_batched_tokens - running * limits.lookahead
    first = _first_admissions(requests, limits, waiting, free_slots, budget, held)
    if first is None:
        return None
    return _Planner(
        requests,
        limits,
        k_for,
        k=k_for(running + first),
        running=running,
        waiting=waiting,
        free_slots=free_slots,
        concurrency=concurrency,
        horizon=horizon,
    ).run()


def _first_admissions(
    requests: Requests, limits: Limits, waiting: int, slots: int, budget: int, held: int
) -> int | None:
    """How many waiting requests the first step admits (its k depends on it), found before
    any lane is walked, as ``_Planner.admit`` finds them (a prefill that would be chunked
    is seen before the KV blocks it needs); None when it would chunk one."""
    free_blocks = limits.kv_blocks - held
    count = 0
    while count < waiting and count < slots and budget > 0:
        chunk = requests.chunk(count)
        if chunk > budget:
            return None
        need = limits.blocks(chunk)
        if need > free_blocks:
            break
        budget -= chunk
        free_blocks -= need
        count += 1
    return count


@dataclass(frozen=True)
class Pricing:
    """What a stretch's steps cost, from the engine."""

    truth: EngineTruth
    slowdown: float
    noise: StepNoise
    table: bool
    speculative: bool
    family: DraftFamily


@dataclass(frozen=True)
class Stretch:
    """A plan priced and cut: per-step figures for steps ``0 .. committed - 1``, the lanes'
    decodes in them (``decodes``) and the KV blocks allocated in the last of them."""

    plan: Plan
    committed: int
    ends: Times
    decoding: Counts
    k: Counts
    emitted: Counts
    first_tokens: Counts
    prompt_tokens: Counts
    prefill_tokens: Counts
    kv_blocks: int
    decodes: LaneSteps

    def accepted_by_step(self, positions: int) -> Counts:
        """Drafts accepted at each position (columns), step by step (rows)."""
        decodes = self.decodes
        accepted = decodes.high - decodes.low - 1
        width = max(positions, self.plan.k) + 1
        counts = np.bincount(
            decodes.step * width + accepted, minlength=self.committed * width
        ).reshape(self.committed, width)
        at_least = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1]
        return at_least[:, 1 : positions + 1]

    def running_after(self, running: int) -> Counts:
        """Requests running after each committed step, ``running`` before the first."""
        planned = self.plan
        steps = self.committed
        finished = [
            step
            for lane, step in enumerate(planned.finishes)
            if step < steps and planned.preempted.get(lane, steps) > step
        ]
        preempted = [step for step in planned.preempted.values() if step < steps]
        change = (
            self.first_tokens
            - _per_step(np.asarray(finished, dtype=np.int64), steps)
            - _per_step(np.asarray(preempted, dtype=np.int64), steps)
        )
        return running + np.cumsum(change)

    def survivors(self) -> list[int]:
        """Lanes still running after the committed steps."""
        planned = self.plan
        steps = self.committed
        admitted = sum(1 for step, _ in planned.admitted if step < steps)
        last = len(planned.lanes) - len(planned.admitted) + admitted
        # A lane finished by its first token finishes in the step that admits it.
        running = np.asarray(planned.finishes[:last], dtype=np.int64) >= steps
        for lane, step in planned.preempted.items():
            if step < steps:
                running[lane] = False
        survivors: list[int] = np.flatnonzero(running).tolist()
        return survivors


def _per_step(index: Counts, steps: int, weights: Counts | None = None) -> Counts:
    return np.bincount(index, weights, minlength=steps)[:steps].astype(np.int64)


def price(
    planned: Plan,
    pricing: Pricing,
    limits: Limits,
    *,
    now: float,
    until: float,
    phase_end: float,
    most: int | None = None,
) -> Stretch:
    """Sum the plan's lanes per step, time every step, and cut the stretch where stepping
    would differ: the first step that starts at or after ``until``, the step that crosses
    ``phase_end`` (the workload's mix changes for arrivals after it), or ``most`` steps."""
    steps = planned.steps
    decodes = planned.all_decodes(steps)
    decoding = _per_step(decodes.step, steps)
    admitted_at = np.asarray([step for step, _ in planned.admitted], dtype=np.int64)
    chunks = np.asarray([e.chunk for _, e in planned.admitted], dtype=np.int64)
    prompts = np.asarray([e.prompt for _, e in planned.admitted], dtype=np.int64)
    prefill = _per_step(admitted_at, steps, chunks)
    k = np.where(decoding > 0, planned.k, 0)
    shapes = EngineSteps(
        batch=decoding,
        k=k,
        context_tokens=_per_step(decodes.step, steps, decodes.context),
        prefill_tokens=prefill,
        prefill_context_tokens=prefill,
        table=pricing.table,
        speculative=pricing.speculative,
        family=pricing.family,
    )
    seconds = pricing.truth.step_times(shapes) * pricing.slowdown
    if pricing.noise.sigma > 0:
        seconds = seconds * pricing.noise.peek(steps)
    ends = np.cumsum(np.concatenate(([now], seconds)))[1:]
    committed = min(
        steps if most is None else most,
        1 + int(np.searchsorted(ends[:-1], until, side="left")),
        1 + int(np.searchsorted(ends, phase_end, side="left")),
    )
    if committed < steps:
        decodes = planned.all_decodes(committed)
    last = decodes.step == committed - 1
    held = int(limits.blocks(decodes.origin[last] + decodes.low[last]).sum())
    kv_blocks = held + int(limits.blocks(chunks[admitted_at == committed - 1]).sum())
    return Stretch(
        plan=planned,
        committed=committed,
        ends=ends[:committed],
        decoding=decoding[:committed],
        k=k[:committed],
        emitted=_per_step(decodes.step, committed, decodes.emitted),
        first_tokens=_per_step(admitted_at, steps)[:committed],
        prompt_tokens=_per_step(admitted_at, steps, prompts)[:committed],
        prefill_tokens=prefill[:committed],
        kv_blocks=kv_blocks,
        decodes=decodes,
    )
