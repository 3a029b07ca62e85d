"""The simulated vLLM V1 engine: a discrete-event model, pure of I/O and of clocks.

Time is a number the caller moves: a benchmark calls ``run_until`` (virtual time, as
fast as the CPU allows); the HTTP server calls ``step`` and sleeps until the step's
end (real time). Each step follows vLLM's scheduler:

* running requests first, then waiting ones, up to ``max_num_seqs`` requests and
  ``max_num_batched_tokens`` tokens (chunked prefill); a decoding request takes
  1 + k_max tokens of the budget;
* KV cache in blocks of ``block_size`` tokens; when the running requests do not fit,
  the last admitted is preempted (its KV dropped, recomputed on resume, vLLM V1's
  only mode) and goes back to the front of the queue;
* k for the step from ``num_speculative_tokens_per_batch_size`` looked up by the
  number of requests scheduled, as vLLM's dense table does, capped by
  ``num_speculative_tokens``; k = 0 drafts nothing. The same k is verified and drafted
  in the step (vLLM verifies the previous step's drafts: the lag is one step);
* step time and KV capacity from the engine's truth (``EngineTruth``, the physics, not
  the controller's belief), times lognormal jitter drawn from the engine's seeded RNG and
  the pod's slowdown; tokens emitted from the request's trace by the replay rule; every
  metric as vLLM counts it. vLLM's frontend records a step's IterationStats only when the
  step emits tokens, so ``vllm:iteration_tokens_total`` observes only those steps: their
  tokens plus the prompts whose first token they emit (a chunked prefill's earlier
  chunks, and a preempted request's recompute, are never observed).

``stepping="bulk"`` (the default) runs the same steps a stretch at a time where it can
(specops_lab.sim._stretch: between the steps that need the whole scheduler, steps are planned
request by request and summed with numpy); ``"single"`` runs every step alone. Both draw
the same requests and the same step-time noise in the same order, so a seed gives the same
run either way (tests/lab/sim/test_bulk_equivalence.py holds them to it).
"""

from __future__ import annotations

import copy
import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Literal, Protocol, cast

import numpy as np
import numpy.typing as npt

from specops.errors import EngineConfigError, SpecValidationError
from specops.profiles import DraftFamily, draft_family
from specops.vllm import DYNAMIC_SCHEDULE_METHODS, SpeculativeConfig
from specops_lab.sim._lanes import Lane, row_lane, walk_lane, walk_lanes
from specops_lab.sim._metrics import EngineMetrics, MetricsRecorder
from specops_lab.sim._noise import StepNoise
from specops_lab.sim._stretch import (
    ADMITTED,
    FINISHED,
    PREEMPTED,
    Entrant,
    Limits,
    Plan,
    Pricing,
    Stretch,
    plan,
    price,
)
from specops_lab.sim._truth import DEFAULT_TRUTH, EngineStep, EngineTruth, load_truth
from specops_lab.sim._workload import DrawnRequest, Workload

__all__ = [
    "EngineConfig",
    "FinishedRequest",
    "SimulatedEngine",
    "StepResult",
    "StepRule",
    "Stepping",
    "k_lookup_table",
    "parse_speculative_config",
]

_log = logging.getLogger(__name__)

Stepping = Literal["bulk", "single"]


class StepRule(Protocol):
    """A per-step k rule the engine also tells about every step (a goodput rule, say).

    ``select(scheduled, cap)`` picks the k of a step before it runs; ``observe`` hears how
    it went (its batch, k, seconds, prefill tokens and the spec-decode counters after it).
    Once ``settled``, ``select`` only reads the rule's state, so a stretch may ask a copy of
    it (``copy.copy``, which must not share what ``observe`` changes) about steps ahead and
    keep the steps it would have run with the stretch's k.
    """

    @property
    def settled(self) -> bool: ...

    def select(self, batch: int, cap: int) -> int: ...

    def observe(
        self,
        batch: int,
        k: int,
        seconds: float,
        prefill_tokens: int,
        drafts: int,
        accepted_per_position: Sequence[int],
    ) -> None: ...


# A stretch plans at most this many (decode step, request) pairs: enough that the numpy
# work of a stretch outweighs its Python, small enough to stay in cache.
_LANE_STEPS = 1 << 16
_MAX_STRETCH = 4096
# Fewer stale lanes than this are walked one by one: walking them together costs numpy calls
# for every step of the walk, one by one only Python steps to each lane's finish.
_WALK_TOGETHER = 64
# A stretch the step rule cuts shorter than this (or half the batch) sends the next
# twice as many steps alone.
_RULE_STRETCH = 8
# What a finished request is observed in, as _observe_finished orders its values.
_FINISHED_HISTOGRAMS = (
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_num_preemptions",
    "vllm:request_prefill_kv_computed_tokens",
    "vllm:request_params_max_tokens",
    "vllm:request_params_n",
    "vllm:request_max_num_generation_tokens",
)


def parse_speculative_config(text: str | None) -> SpeculativeConfig | None:
    """``--speculative-config`` JSON to a SpeculativeConfig; errors name the key."""
    if text is None or text.strip() in ("", "null", "{}"):
        return None
    try:
        config = SpeculativeConfig.from_json(text)
    except SpecValidationError as exc:
        raise EngineConfigError(str(exc)) from exc
    if config.num_speculative_tokens is None:
        raise EngineConfigError(
            "invalid --speculative-config: num_speculative_tokens: required here (vLLM reads "
            "a default from the draft model's config, which the simulated engine does not have)"
        )
    return config


def k_lookup_table(
    schedule: Sequence[tuple[int, int, int]], max_num_seqs: int, num_speculative_tokens: int
) -> tuple[int, ...]:
    """vLLM's build_dynamic_sd_schedule_lookup: index = scheduled requests, value = k.

    Ranges are inclusive; a gap carries the previous range's k forward, and so does the
    tail past the last range; every k is capped by ``num_speculative_tokens``.
    """
    dense = [0] * (max_num_seqs + 1)
    next_batch = 1
    last_k: int | None = None
    for start, end, k in sorted(schedule):
        if start > next_batch and last_k is not None:
            for batch in range(next_batch, min(start, max_num_seqs + 1)):
                dense[batch] = min(num_speculative_tokens, last_k)
        for batch in range(max(start, next_batch), min(end, max_num_seqs) + 1):
            dense[batch] = min(num_speculative_tokens, k)
        next_batch = max(next_batch, end + 1)
        last_k = k
        if next_batch > max_num_seqs:
            break
    if last_k is None:
        raise EngineConfigError("num_speculative_tokens_per_batch_size must not be empty")
    for batch in range(next_batch, max_num_seqs + 1):
        dense[batch] = min(num_speculative_tokens, last_k)
    return tuple(dense)


@dataclass(frozen=True)
class EngineConfig:
    """The vLLM engine arguments the simulation honours (defaults: vLLM 0.33 serve on H100)."""

    served_model_name: str = "model"
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    max_model_len: int = 131072
    block_size: int = 16
    speculative: SpeculativeConfig | None = None

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size"):
            if getattr(self, name) < 1:
                raise EngineConfigError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class FinishedRequest:
    """A completed request and its latencies, as vLLM's FinishedRequestStats has them."""

    request_id: str
    finish_reason: str
    prompt_tokens: int
    output_tokens: int
    arrival: float
    finished: float
    ttft: float
    queue_time: float
    prefill_time: float
    decode_time: float
    num_preemptions: int
    max_tokens: int
    """The request's max_tokens as vLLM's frontend passes it: clamped to the room left."""

    @property
    def e2e_latency(self) -> float:
        return self.finished - self.arrival

    @property
    def tpot(self) -> float:
        """Mean time per output token after the first (vLLM: 0 for one-token outputs)."""
        return self.decode_time / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0


@dataclass(frozen=True)
class StepResult:
    """One engine step: when, its shape, tokens per request (if tracked), what finished."""

    start: float
    end: float
    decode_batch: int
    prefill_tokens: int
    k: int
    emitted: tuple[tuple[str, int], ...] = ()
    finished: tuple[FinishedRequest, ...] = field(default=())


class _Request:
    __slots__ = (
        "arrival",
        "finish_reason",
        "first_token_ts",
        "generated",
        "lane",
        "last_token_ts",
        "max_tokens",
        "num_preemptions",
        "pos",
        "prompt_len",
        "request_id",
        "scheduled_ts",
        "shared",
        "target",
        "trace",
    )

    def __init__(
        self,
        request_id: str,
        arrival: float,
        prompt_len: int,
        target: int,
        max_tokens: int,
        finish_reason: str,
        drawn: DrawnRequest,
    ) -> None:
        self.request_id = request_id
        self.arrival = arrival
        self.prompt_len = prompt_len
        self.target = target
        self.max_tokens = max_tokens
        self.finish_reason = finish_reason
        self.trace = drawn.trace
        self.shared = drawn.shared
        self.generated = 0
        self.pos = 0
        self.scheduled_ts = -1.0
        self.first_token_ts = -1.0
        self.last_token_ts = -1.0
        self.num_preemptions = 0
        self.lane: Lane | None = None
        """Its lane from its next first token, once a stretch has walked it."""


@dataclass(slots=True)
class _Ahead:
    """A request drawn ahead for a closed loop's next arrival, in a mix phase and family;
    ``request`` is made from it (and its lane walked) when a stretch first needs it."""

    phase: int
    family: DraftFamily
    drawn: DrawnRequest
    request: _Request | None = None


@dataclass(frozen=True)
class _Speculation:
    method: str | None
    family: DraftFamily
    k_max: int
    lookup: tuple[int, ...] | None
    kv_blocks: int


class SimulatedEngine:
    """One vLLM engine whose physics is a truth. See the module docstring.

    ``truth`` defaults to the shipped default truth; ``seed`` seeds the step-time jitter;
    ``slowdown`` multiplies every step (a slower pod: the truth's ``slow_pod_factor``);
    ``stepping`` runs steps a stretch at a time ("bulk") or one by one ("single").
    """

    def __init__(
        self,
        workload: Workload,
        config: EngineConfig,
        *,
        truth: EngineTruth | None = None,
        track_tokens: bool = False,
        seed: int = 0,
        slowdown: float = 1.0,
        stepping: Stepping = "bulk",
    ) -> None:
        if slowdown <= 0:
            raise EngineConfigError(f"slowdown must be > 0, got {slowdown}")
        if stepping not in ("bulk", "single"):
            raise EngineConfigError(f"stepping must be 'bulk' or 'single', got {stepping!r}")
        self.truth = load_truth(DEFAULT_TRUTH) if truth is None else truth
        self.slowdown = slowdown
        self.stepping: Stepping = stepping
        self._noise = StepNoise(np.random.default_rng(seed), self.truth.jitter_sigma)
        self.workload = workload
        self.config = config
        self.track_tokens = track_tokens
        self._k_selector: Callable[[int, int], int] | None = None
        self.step_rule: StepRule | None = None
        """A rule that picks every step's k and hears how each went (see StepRule). After
        a stretch it is the copy of itself that heard the stretch's steps."""
        self._rule_ahead: StepRule | None = None
        self.now = 0.0
        self.available_at = 0.0
        self.last_k = 0
        """The k of the last step run."""
        self._last_seconds = 0.0
        self._last_stretch = 0
        self._alone_for = 0
        self._ids = count()
        self._finished: list[FinishedRequest] = []
        self._waiting: deque[_Request] = deque()
        self._ahead: deque[_Ahead] = deque()
        # Where the workload's draws stood before the first of the requests drawn ahead since
        # ``_ahead`` was last empty, and how many of those have been taken from it.
        self._ahead_stream: dict[str, object] = {}
        self._ahead_taken = 0
        self._sample_at: deque[float] = deque()
        self._samples: list[tuple[float, int, int]] = []
        self._metrics = MetricsRecorder(config.max_model_len)
        slots = config.max_num_seqs
        width = max(1, workload.max_trace_len)
        self._trace = np.ones((slots, width), dtype=np.int16)
        self._tlen = np.ones(slots, dtype=np.int64)
        self._pos = np.zeros(slots, dtype=np.int64)
        self._gen = np.zeros(slots, dtype=np.int64)
        self._target = np.zeros(slots, dtype=np.int64)
        self._ctx = np.zeros(slots, dtype=np.int64)
        self._last_ts = np.zeros(slots, dtype=np.float64)
        self._decoding = np.zeros(slots, dtype=bool)
        self._slot_request: list[_Request | None] = [None] * slots
        self._slot_ids: list[str] = [""] * slots
        self._lanes: list[Lane | None] = [None] * slots
        self._free: list[int] = list(range(slots - 1, -1, -1))
        self._order: list[int] = []
        self._prefill_left: dict[int, int] = {}
        self._emitted: tuple[tuple[str, int], ...] = ()
        self._kv_used_blocks = 0
        self._spec = self._speculation(config.speculative)

    # -- configuration -----------------------------------------------------------------

    def _speculation(self, config: SpeculativeConfig | None) -> _Speculation:
        method = None if config is None else config.canonical_method
        k_max = 0 if config is None else int(config.num_speculative_tokens or 0)
        lookup = None
        if config is not None and config.num_speculative_tokens_per_batch_size is not None:
            if method in DYNAMIC_SCHEDULE_METHODS:
                lookup = k_lookup_table(
                    config.num_speculative_tokens_per_batch_size, self.config.max_num_seqs, k_max
                )
            else:
                _log.warning(
                    "num_speculative_tokens_per_batch_size is ignored for method %s", method
                )
        family = draft_family(method or "eagle")
        kv_tokens = self.truth.kv_capacity(None if method is None else family)
        if kv_tokens < self.config.block_size:
            raise EngineConfigError(f"truth {self.truth.name} leaves no KV cache for {method}")
        self._metrics.set_positions(k_max)
        blocks = kv_tokens // self.config.block_size
        self._metrics.set_kv_pool(self.config.block_size, blocks, self.config.max_model_len)
        return _Speculation(
            method=method,
            family=family,
            k_max=k_max,
            lookup=lookup,
            kv_blocks=blocks,
        )

    @property
    def k_selector(self) -> Callable[[int, int], int] | None:
        """An in-engine k rule (scheduled requests, cap) -> k, replacing the table for
        baselines vLLM does not ship, such as a per-step goodput rule. It is asked before
        every step, so an engine with one runs every step alone."""
        return self._k_selector

    @k_selector.setter
    def k_selector(self, rule: Callable[[int, int], int] | None) -> None:
        self._k_selector = rule
        self._lanes = [None] * len(self._lanes)  # no stretch reads them while a rule is set

    @property
    def speculative_config(self) -> SpeculativeConfig | None:
        return self.config.speculative

    def restart(self, speculative: SpeculativeConfig | None, downtime_s: float) -> None:
        """Reconfigure as a restart does: requeue all work, load for ``downtime_s``.

        Running requests lose their KV and go back to the queue in order (they recompute
        on resume); nothing is served until ``now + downtime_s``. Counters carry on, as a
        benchmark wants; a real restart would reset them (Prometheus sees a reset).
        """
        if downtime_s < 0:
            raise EngineConfigError(f"downtime_s must be >= 0, got {downtime_s}")
        for slot in reversed(list(self._order)):
            self._preempt(slot, count_it=False)
        self.config = EngineConfig(
            served_model_name=self.config.served_model_name,
            max_num_seqs=self.config.max_num_seqs,
            max_num_batched_tokens=self.config.max_num_batched_tokens,
            max_model_len=self.config.max_model_len,
            block_size=self.config.block_size,
            speculative=speculative,
        )
        self._spec = self._speculation(speculative)
        self.available_at = self.now + downtime_s
        self._kv_used_blocks = 0
        self._update_gauges()

    # -- requests ----------------------------------------------------------------------

    def add_request(
        self,
        request_id: str | None = None,
        *,
        arrival: float | None = None,
        prompt_tokens: int | None = None,
        max_tokens: int | None = None,
        ignore_eos: bool = False,
    ) -> str:
        """Queue a request; unset lengths come from the workload. Returns its id.

        Output length is the workload's (finish reason "stop") unless ``max_tokens`` cuts
        it or ``ignore_eos`` makes it exactly ``max_tokens`` (reason "length").
        """
        arrival = self.now if arrival is None else arrival
        request = self._request(
            self._next_drawn(arrival), arrival, prompt_tokens, max_tokens, ignore_eos
        )
        request.request_id = request_id or f"cmpl-{next(self._ids)}"
        self._waiting.append(request)
        self._set_waiting()
        return request.request_id

    def _next_drawn(self, arrival: float) -> DrawnRequest:
        """The workload's next request: the first drawn ahead (a stretch draws ahead;
        stepping never does), else a fresh draw."""
        phase = self.workload.phase(arrival)
        self._drop_ahead(phase)
        if self._ahead:
            return self._take_ahead().drawn
        return self.workload.draw_in(phase, self._spec.family)

    def _take_ahead(self) -> _Ahead:
        """The first request drawn ahead, counted so that ``_drop_ahead`` can draw it again."""
        self._ahead_taken += 1
        return self._ahead.popleft()

    def _drop_ahead(self, phase: int) -> None:
        """Forget requests drawn ahead for another phase or family, and draw them again:
        the workload's draws rewind to before them, as if they had never been drawn. All
        were drawn alike (a stretch drops them first), so the draws rewind to before the
        first drawn and draw again those already taken: far cheaper than keeping where the
        draws stood before each."""
        ahead = self._ahead
        if ahead and (ahead[0].phase != phase or ahead[0].family is not self._spec.family):
            self.workload.rewind(self._ahead_stream)
            for _ in range(self._ahead_taken):
                self.workload.draw_in(ahead[0].phase, ahead[0].family)
            ahead.clear()

    def _request(
        self,
        drawn: DrawnRequest,
        arrival: float,
        prompt_tokens: int | None = None,
        max_tokens: int | None = None,
        ignore_eos: bool = False,
    ) -> _Request:
        prompt = drawn.prompt_len if prompt_tokens is None else prompt_tokens
        room = self.config.max_model_len - prompt
        if prompt < 1 or room < 1:
            raise EngineConfigError(
                f"prompt of {prompt} tokens does not fit max_model_len={self.config.max_model_len}"
            )
        limit = room if max_tokens is None else min(max_tokens, room)
        if ignore_eos or drawn.output_len >= limit:
            target, reason = limit, "length"
        else:
            target, reason = drawn.output_len, "stop"
        return _Request("", arrival, prompt, target, limit, reason, drawn)

    def abort(self, request_id: str) -> bool:
        """Drop a request (the client went away). As in vLLM, where the frontend forgets an
        aborted request before the engine could report it finished, nothing records it:
        not request_success, nor any per-request histogram."""
        for queued in self._waiting:
            if queued.request_id == request_id:
                self._waiting.remove(queued)
                return True
        for slot in self._order:
            request = self._slot_request[slot]
            if request is not None and request.request_id == request_id:
                self._release(slot)
                return True
        return False

    @property
    def num_running(self) -> int:
        return len(self._order)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def context_tokens(self) -> int:
        """Tokens the running requests hold in context (prompt computed so far and output):
        the reference for what the KV-cache usage measures."""
        return int(self._ctx[list(self._order)].sum()) if self._order else 0

    @property
    def has_work(self) -> bool:
        return bool(self._order or self._waiting)

    def metrics(self) -> EngineMetrics:
        return self._metrics.snapshot()

    def spec_decode_counts(self) -> tuple[int, tuple[int, ...]]:
        """Drafts and accepted tokens per position so far: the part of ``metrics()`` a
        per-step rule reads after every step, without copying every histogram."""
        metrics = self._metrics
        accepted = metrics.accepted_per_position[: metrics.num_positions]
        return metrics.counters["vllm:spec_decode_num_drafts"], tuple(accepted.tolist())

    def take_samples(self) -> list[tuple[float, int, int]]:
        """(time, running requests, k) for run_until's ``sample_at`` times, oldest first."""
        samples, self._samples = self._samples, []
        return samples

    def _note_samples(
        self, running: Sequence[int] = (), ends: Sequence[float] = (), ks: Sequence[int] = ()
    ) -> None:
        """Note the samples due by now: from a stretch's per-step running counts, ends and
        k where given, else from the engine as it stands."""
        due = self._sample_at
        for busy, end, k in zip(running, ends, ks, strict=True):
            while due and due[0] <= end:
                self._samples.append((due.popleft(), busy, k))
        while due and due[0] <= self.now:
            self._samples.append((due.popleft(), len(self._order), self.last_k))

    def take_finished(self) -> list[FinishedRequest]:
        """Requests finished since the last call, oldest first."""
        finished, self._finished = self._finished, []
        return finished

    # -- time --------------------------------------------------------------------------

    def run_until(
        self, until: float, *, concurrency: int | None = None, sample_at: Sequence[float] = ()
    ) -> int:
        """Step while there is work and the clock is before ``until``; idle time jumps.

        The last step may end past ``until`` (steps are not cut). With ``concurrency``, a
        closed loop: after every step that ends before ``until``, requests from the workload
        arrive at its end until running and waiting add up to ``concurrency``. For each of
        ``sample_at`` (increasing times before ``until``) the running requests and k after
        the first step that ends at or after it are noted (``take_samples``), as a scraper
        polling between steps would see them. Returns steps taken.
        """
        self._sample_at.extend(sample_at)
        steps = 0
        while self.now < until:
            if self.now < self.available_at:
                self.now = min(until, self.available_at)
                self._note_samples()
                continue
            if not self.has_work:
                self.now = until
                self._note_samples()
                break
            steps += self._advance(until, concurrency, self._horizon(until))[0]
            if concurrency is not None and self.now < until:
                for _ in range(concurrency - len(self._order) - len(self._waiting)):
                    self.add_request()
        return steps

    def step(self) -> StepResult:
        """Run one engine step starting at ``now`` (or when the engine is back up)."""
        self.now = max(self.now, self.available_at)
        return self._advance(math.inf, None, 1)[1]

    def _advance(
        self, until: float, concurrency: int | None, horizon: int
    ) -> tuple[int, StepResult]:
        """Run a stretch of up to ``horizon`` steps where one can run, else one step alone."""
        if not self._order and self._waiting:
            self._fits_alone(self._waiting[0])
        rule = self.step_rule
        settled = rule is None or (rule.settled and self._alone_for == 0)
        self._alone_for = max(0, self._alone_for - 1)
        if (
            self.stepping == "bulk"
            and self._k_selector is None
            and settled
            and not self._prefill_left
        ):
            phase_end = self.workload.next_phase_start(self.now)
            stretch = self._stretch(until, phase_end, concurrency, horizon)
            if stretch is not None:
                return stretch.committed, self._commit(stretch, min(until, phase_end))
        return 1, self._step_alone()

    def _horizon(self, until: float) -> int:
        """Steps to plan: about as many as reach ``until``, within the lane-step budget, and
        at most twice the last stretch (where stretches end early, planning far is waste)."""
        most = min(
            _MAX_STRETCH,
            max(16, _LANE_STEPS // max(1, len(self._order))),
            max(16, 2 * self._last_stretch),
        )
        if self._last_seconds <= 0:
            return most
        return max(1, int(min(most, (until - self.now) / self._last_seconds * 1.05 + 2)))

    def _k_for(self, scheduled: int, rule: StepRule | None = None) -> int:
        """k of a step that decodes, with ``scheduled`` requests (``rule``: as this copy of
        the step rule would pick it)."""
        spec = self._spec
        if spec.k_max == 0:
            return 0
        rule = rule or self.step_rule
        select = self._k_selector or (rule.select if rule else None)
        if select is not None:
            return max(0, min(select(scheduled, spec.k_max), spec.k_max))
        return spec.lookup[scheduled] if spec.lookup is not None else spec.k_max

    # -- stretches ---------------------------------------------------------------------

    def _stretch(
        self, until: float, phase_end: float, concurrency: int | None, horizon: int
    ) -> Stretch | None:
        """The stretch from now, priced and cut; None when the next step must run alone."""
        spec = self._spec
        phase = self.workload.phase(self.now)
        self._drop_ahead(phase)
        limits = Limits(
            max_batched_tokens=self.config.max_num_batched_tokens,
            lookahead=1 + spec.k_max,
            block=self.config.block_size,
            kv_blocks=spec.kv_blocks,
        )
        planned = plan(
            _Requests(self, phase, horizon),
            limits,
            running=len(self._order),
            held=self._used_blocks(limits.block, limits.lookahead),
            waiting=len(self._waiting),
            free_slots=len(self._free),
            concurrency=concurrency,
            k_for=self._k_for,
            horizon=horizon,
        )
        if planned is None:
            return None
        pricing = Pricing(
            truth=self.truth,
            slowdown=self.slowdown,
            noise=self._noise,
            table=spec.lookup is not None,
            speculative=spec.k_max > 0,
            family=spec.family,
        )
        stretch = price(planned, pricing, limits, now=self.now, until=until, phase_end=phase_end)
        self._rule_ahead = None
        if self.step_rule is not None and stretch.committed > 1:
            agreed, self._rule_ahead = self._rule_agrees(self.step_rule, stretch)
            enough = max(_RULE_STRETCH, len(self._order) // 2)
            if agreed < enough:
                # The rule changes k too often here for planning ahead (whose cost grows with
                # the batch) to pay: the next steps run alone.
                self._alone_for = 2 * enough
            if agreed < stretch.committed:
                stretch = price(
                    planned,
                    pricing,
                    limits,
                    now=self.now,
                    until=until,
                    phase_end=phase_end,
                    most=agreed,
                )
        return stretch if stretch.committed else None

    def _rule_steps(
        self, stretch: Stretch
    ) -> list[tuple[int, int, float, int, int, tuple[int, ...]]]:
        """What the step rule hears of each of the stretch's steps, as a step alone tells it."""
        drafts, accepted = self.spec_decode_counts()
        per_step = stretch.accepted_by_step(len(accepted))
        after = np.asarray(accepted, dtype=np.int64) + np.cumsum(per_step, axis=0)
        drafted = drafts + np.cumsum(np.where(stretch.k > 0, stretch.decoding, 0))
        starts = np.concatenate(([self.now], stretch.ends[:-1]))
        return [
            (int(batch), int(k), float(end - begin), int(prefill), int(d), tuple(row))
            for batch, k, end, begin, prefill, d, row in zip(
                stretch.decoding.tolist(),
                stretch.k.tolist(),
                stretch.ends.tolist(),
                starts.tolist(),
                stretch.prefill_tokens.tolist(),
                drafted.tolist(),
                after.tolist(),
                strict=True,
            )
        ]

    def _rule_agrees(self, rule: StepRule, stretch: Stretch) -> tuple[int, StepRule]:
        """How many of the stretch's steps the rule would have run with the stretch's k,
        and a copy of it that has heard those steps (told of each before asked about the
        next)."""
        trial = copy.copy(rule)
        scheduled = (stretch.decoding + stretch.first_tokens).tolist()
        for step, heard in enumerate(self._rule_steps(stretch)):
            if step and heard[0] and self._k_for(scheduled[step], trial) != heard[1]:
                return step, trial
            trial.observe(*heard)
        return stretch.committed, trial

    def _running_lanes(self, cap: int, horizon: int) -> list[Lane]:
        """The running requests' lanes for ``cap``, ``horizon`` steps ahead: kept ones
        walked on, the others walked afresh."""
        order = self._order
        lanes = [self._lanes[slot] for slot in order]
        stale = []
        for i, lane in enumerate(lanes):
            if lane is None or lane.cap != cap:
                stale.append(i)
            elif lane.trace is not None:  # else walked to its finish already
                lane.cover(horizon)
        if stale:
            fresh = self._walk_stale([order[i] for i in stale], cap, horizon)
            for i, lane in zip(stale, fresh, strict=True):
                lanes[i] = lane
        return [lane for lane in lanes if lane is not None]

    def _walk_stale(self, slots: list[int], cap: int, horizon: int) -> list[Lane]:
        """The lanes of the requests in ``slots`` walked afresh (and kept): from their rows'
        walks where they are on them, the others together, whose cost is numpy calls per
        step walked, or one by one where they are few."""
        requests = []
        for slot in slots:
            request = self._slot_request[slot]
            assert request is not None
            requests.append(request)
        pos = self._pos[slots].tolist()
        generated = self._gen[slots].tolist()
        context = self._ctx[slots].tolist()
        fresh = [
            row_lane(
                request.trace,
                pos=pos[i],
                generated=generated[i],
                context=context[i],
                target=request.target,
                cap=cap,
            )
            if request.shared
            else None
            for i, request in enumerate(requests)
        ]
        rest = [i for i, lane in enumerate(fresh) if lane is None]
        if len(rest) < _WALK_TOGETHER:
            for i in rest:
                fresh[i] = walk_lane(
                    requests[i].trace,
                    shared=False,
                    pos=pos[i],
                    generated=generated[i],
                    context=context[i],
                    target=requests[i].target,
                    cap=cap,
                    steps=horizon,
                )
        else:
            at = [slots[i] for i in rest]
            together = walk_lanes(
                self._trace[at],
                self._tlen[at],
                pos=self._pos[at],
                generated=self._gen[at],
                context=self._ctx[at],
                target=self._target[at],
                cap=cap,
                steps=horizon,
                originals=[requests[i].trace for i in rest],
            )
            for i, lane in zip(rest, together, strict=True):
                fresh[i] = lane
        walked = cast(list[Lane], fresh)
        for slot, lane in zip(slots, walked, strict=True):
            self._lanes[slot] = lane
        return walked

    def _entrant(self, request: _Request, cap: int, horizon: int) -> Entrant:
        chunk = request.prompt_len + request.generated
        generated = request.generated + 1
        lane = None
        if generated < request.target:
            lane = request.lane
            if lane is None or not lane.fits(cap, request.pos, generated):
                lane = request.lane = walk_lane(
                    request.trace,
                    shared=request.shared,
                    pos=request.pos,
                    generated=generated,
                    context=chunk + 1,
                    target=request.target,
                    cap=cap,
                    steps=horizon,
                )
            lane.done = 0
            lane.cover(horizon)
        return Entrant(chunk, request.prompt_len if request.first_token_ts < 0 else 0, lane)

    def _ahead_request(self, index: int, phase: int) -> _Request:
        """The closed loop's ``index``-th next arrival, drawn ahead if not yet drawn."""
        family = self._spec.family
        while len(self._ahead) <= index:
            if not self._ahead:
                self._ahead_stream = self.workload.stream()
                self._ahead_taken = 0
            drawn = self.workload.draw_in(phase, family)
            self._ahead.append(_Ahead(phase, family, drawn))
        ahead = self._ahead[index]
        if ahead.request is None:
            ahead.request = self._request(ahead.drawn, 0.0)
        return ahead.request

    def _commit(self, stretch: Stretch, arrivals_until: float) -> StepResult:
        """Apply a stretch's committed steps: counters, histograms, requests, the clock."""
        if self._rule_ahead is not None:
            # The copy that heard the stretch's steps goes on as the rule.
            self.step_rule, self._rule_ahead = self._rule_ahead, None
        elif self.step_rule is not None:
            for heard in self._rule_steps(stretch):
                self.step_rule.observe(*heard)
        start = self.now
        running = list(self._order)
        if self._sample_at:
            self._note_samples(
                stretch.running_after(len(running)).tolist(),
                stretch.ends.tolist(),
                stretch.k.tolist(),
            )
        self._count_stretch(stretch, running)
        slots, names, finished = self._replay(stretch, running, arrivals_until)
        self._settle(stretch, slots, len(running))
        if self._noise.sigma > 0:
            self._noise.take(stretch.committed)
        ends = stretch.ends
        first = start if stretch.committed == 1 else float(ends[-2])
        self.now = float(ends[-1])
        self.last_k = int(stretch.k[-1])
        self._last_seconds = self.now - first
        self._last_stretch = stretch.committed
        self._kv_used_blocks = stretch.kv_blocks
        self._update_gauges()
        emitted: tuple[tuple[str, int], ...] = ()
        if self.track_tokens:
            decodes = stretch.decodes
            at_last = decodes.step == stretch.committed - 1
            lanes = decodes.lane[at_last].tolist()
            counts = decodes.emitted[at_last].tolist()
            emitted = tuple((names[lane], n) for lane, n in zip(lanes, counts, strict=True))
            last = stretch.committed - 1
            emitted += tuple(
                (names[lane], 1) for step, lane in self._admitted_lanes(stretch) if step == last
            )
        return StepResult(
            first,
            self.now,
            int(stretch.decoding[-1]),
            int(stretch.prefill_tokens[-1]),
            self.last_k,
            emitted,
            finished,
        )

    @staticmethod
    def _admitted_lanes(stretch: Stretch) -> list[tuple[int, int]]:
        first = len(stretch.plan.lanes) - len(stretch.plan.admitted)
        return [
            (step, first + offset)
            for offset, (step, _) in enumerate(stretch.plan.admitted)
            if step < stretch.committed
        ]

    def _count_stretch(self, stretch: Stretch, running: list[int]) -> None:
        """The stretch's counters and per-step histograms."""
        metrics = self._metrics
        histograms = metrics.histograms
        generated = stretch.emitted + stretch.first_tokens
        metrics.counters["vllm:generation_tokens"] += int(generated.sum())
        histograms["vllm:iteration_tokens_total"].observe_many(
            (stretch.prompt_tokens + generated)[generated > 0].astype(np.float64)
        )
        prompt = int(stretch.prompt_tokens.sum())
        metrics.counters["vllm:prompt_tokens"] += prompt
        metrics.labelled["vllm:prompt_tokens_by_source"]["local_compute"] += prompt
        decodes = stretch.decodes
        if stretch.plan.k:
            raw = decodes.high - decodes.low
            self._count_drafts(raw - 1, stretch.plan.k, int(raw.size))
        ends = stretch.ends
        itl = histograms["vllm:inter_token_latency_seconds"]
        decoded = [running[lane] for lane in decodes.lane[decodes.step == 0].tolist()]
        itl.observe_many(ends[0] - self._last_ts[decoded])
        itl.observe_many(np.diff(ends), stretch.decoding[1:])

    def _replay(
        self, stretch: Stretch, running: list[int], arrivals_until: float
    ) -> tuple[list[int], list[str], tuple[FinishedRequest, ...]]:
        """Preempt, admit, finish and queue requests as the stretch's steps did (arrivals
        only after steps that end before ``arrivals_until``). Returns the slot and request id
        of every lane, and what finished in the last step.

        Only the requests and the slots' free list (whose order later steps alone sum
        latencies in) are kept step by step; the slots' arrays are left to ``_settle``,
        which writes what the stretch leaves in them at once."""
        planned = stretch.plan
        committed = stretch.committed
        ends = stretch.ends.tolist()
        before = int(stretch.ends.searchsorted(arrivals_until))  # the ends rise
        first = len(running)
        slots = [*running, *([-1] * len(planned.admitted))]
        names = [self._slot_ids[slot] for slot in running] + [""] * len(planned.admitted)
        phase = self.workload.phase(self.now)
        waiting = self._waiting
        slot_request = self._slot_request
        records: list[FinishedRequest] = []
        last: list[FinishedRequest] = []
        first_tokens: list[float] = []
        for step, what, lane in planned.log:
            if step >= committed:
                break
            end = ends[step]
            if what == ADMITTED:
                request = waiting.popleft()
                slot = self._seat(request, ends[step - 1] if step else self.now)
                entrant = planned.admitted[lane - first][1]
                if entrant.lane is not None:
                    entrant.lane.done = 0
                    request.lane = self._lanes[slot] = entrant.lane
                if request.first_token_ts < 0:
                    request.first_token_ts = end
                    first_tokens.append(end - request.arrival)
                slots[lane] = slot
                names[lane] = request.request_id
            elif what == FINISHED:
                record = self._record(slot_request[slots[lane]], end)
                self._vacate(slots[lane])
                records.append(record)
                if step == committed - 1:
                    last.append(record)
            elif what == PREEMPTED:
                self._preempt_lane(planned, lane, slots[lane], step)
            elif step < before:  # an arrival
                request = self._ahead_request(0, phase)
                self._take_ahead()
                request.arrival = end
                request.request_id = f"cmpl-{next(self._ids)}"
                waiting.append(request)
        self._metrics.histograms["vllm:time_to_first_token_seconds"].observe_each(
            np.asarray(first_tokens, dtype=np.float64)
        )
        self._finished.extend(records)
        self._observe_finished(records)
        return slots, names, tuple(last)

    def _settle(self, stretch: Stretch, slots: list[int], first: int) -> None:
        """The slots' state after the stretch: the running lanes' walk, so many steps on,
        and the traces of those admitted in it (lanes from ``first`` on); free slots hold
        nothing."""
        planned = stretch.plan
        survivors = stretch.survivors()
        self._order = [slots[lane] for lane in survivors]
        free = self._free
        self._decoding[free] = False
        self._ctx[free] = 0
        if not survivors:
            return
        lanes = cast(list[Lane], [planned.lanes[lane_id] for lane_id in survivors])
        moved = []
        for lane_id, lane in zip(survivors, lanes, strict=True):
            lane.done += stretch.committed - planned.starts[lane_id]
            moved.append(int(lane.cum[lane.done]))
        at = self._order
        shift = np.asarray(moved, dtype=np.int64)
        self._pos[at] = np.asarray([lane.pos for lane in lanes], dtype=np.int64) + shift
        self._gen[at] = np.asarray([lane.generated for lane in lanes], dtype=np.int64) + shift
        self._ctx[at] = np.asarray([lane.context for lane in lanes], dtype=np.int64) + shift
        self._last_ts[at] = float(stretch.ends[-1])
        admitted = [slots[lane] for lane in survivors if lane >= first]
        for slot in admitted:
            self._load(slot)
        self._decoding[admitted] = True

    def _preempt_lane(self, planned: Plan, lane_id: int, slot: int, step: int) -> None:
        """Preempt a lane at the start of ``step``, from the state its decodes left, to resume
        with the lane the plan gave it."""
        lane = planned.lanes[lane_id]
        request = self._slot_request[slot]
        assert lane is not None and lane is self._lanes[slot] and request is not None
        done = lane.done + step - planned.starts[lane_id]
        moved = int(lane.cum[done])
        request.pos = lane.pos + moved
        request.generated = lane.generated + moved
        request.lane = planned.resumed[lane_id]
        self._vacate(slot)
        self._requeue(request, count_it=True)

    # -- one step alone ----------------------------------------------------------------

    def _step_alone(self) -> StepResult:
        self.now = max(self.now, self.available_at)
        start = self.now
        spec = self._spec
        block = self.config.block_size
        lookahead = 1 + spec.k_max
        ctx = self._ctx
        used = self._fit_running_in_kv(block, lookahead)
        decoding = np.flatnonzero(self._decoding)
        budget = self.config.max_num_batched_tokens - decoding.size * lookahead
        chunks = self._schedule_prefills(start, budget, block, lookahead, used)
        scheduled = decoding.size + len(chunks)
        k = self._k_for(scheduled) if decoding.size else 0
        prefill_tokens = sum(chunk for _, chunk in chunks)
        shape = EngineStep(
            batch=int(decoding.size),
            k=k,
            context_tokens=int(ctx[decoding].sum()) if decoding.size else 0,
            prefill_tokens=prefill_tokens,
            prefill_context_tokens=sum(int(ctx[slot]) + chunk for slot, chunk in chunks),
            table=spec.lookup is not None,
            speculative=spec.k_max > 0,
            family=spec.family,
        )
        seconds = self.truth.step_time(shape) * self.slowdown
        if self._noise.sigma > 0:
            seconds *= float(self._noise.peek(1)[0])
            self._noise.take(1)
        end = start + seconds
        self.now = end
        self._emitted = ()
        generated = self._decode(decoding, k, end) if decoding.size else 0
        first_tokens, computed_prompt_tokens = self._finish_prefills(chunks, end)
        generated += first_tokens
        metrics = self._metrics
        metrics.counters["vllm:generation_tokens"] += generated
        if generated:
            metrics.histograms["vllm:iteration_tokens_total"].observe(
                computed_prompt_tokens + generated
            )
        metrics.counters["vllm:prompt_tokens"] += computed_prompt_tokens
        metrics.labelled["vllm:prompt_tokens_by_source"]["local_compute"] += computed_prompt_tokens
        emitted: tuple[tuple[str, int], ...] = ()
        if self.track_tokens:
            emitted = self._emitted
        finished = self._collect_finished(end)
        self._update_gauges()
        self.last_k = k
        self._last_seconds = seconds
        if self.step_rule is not None:
            self.step_rule.observe(
                int(decoding.size), k, end - start, prefill_tokens, *self.spec_decode_counts()
            )
        self._note_samples()
        return StepResult(start, end, int(decoding.size), prefill_tokens, k, emitted, finished)

    def _fits_alone(self, request: _Request) -> None:
        """Refuse a request whose first prefill chunk an empty KV cache cannot hold: it would
        wait for ever. vLLM never gets here: it refuses to start when its cache cannot hold
        one request of max_model_len."""
        block, lookahead = self.config.block_size, 1 + self._spec.k_max
        chunk = min(request.prompt_len + request.generated, self.config.max_num_batched_tokens)
        if (chunk + lookahead + block - 1) // block <= self._spec.kv_blocks:
            return
        raise EngineConfigError(
            f"truth {self.truth.name}: a request needs {chunk + lookahead} KV-cache tokens to "
            f"start and the whole cache holds {self._spec.kv_blocks * block}; give the truth "
            f"more kv_cache_tokens (less draft.kv_tokens) or serve shorter requests (vLLM "
            f"refuses to start when its cache cannot hold one request of max_model_len, "
            f"{self.config.max_model_len} here)"
        )

    def _used_blocks(self, block: int, lookahead: int) -> int:
        if not self._order:
            return 0
        ctx = self._ctx[self._order]
        return int(((ctx + lookahead + block - 1) // block).sum())

    def _fit_running_in_kv(self, block: int, lookahead: int) -> int:
        """Preempt the last admitted while the running outgrow the cache; the blocks held."""
        used = self._used_blocks(block, lookahead)
        while self._order and used > self._spec.kv_blocks:
            self._preempt(self._order[-1], count_it=True)
            used = self._used_blocks(block, lookahead)
        return used

    def _schedule_prefills(
        self, now: float, budget: int, block: int, lookahead: int, used: int
    ) -> list[tuple[int, int]]:
        chunks: list[tuple[int, int]] = []
        for slot, left in self._prefill_left.items():
            if budget <= 0:
                break
            chunk = min(left, budget)
            chunks.append((slot, chunk))
            budget -= chunk
        free_blocks = self._spec.kv_blocks - used
        free_blocks -= sum((chunk + block - 1) // block for _, chunk in chunks)
        waiting = self._waiting
        while waiting and self._free and budget > 0:
            request = waiting[0]
            left = request.prompt_len + request.generated
            chunk = min(left, budget)
            need = (chunk + lookahead + block - 1) // block
            if need > free_blocks:
                break
            waiting.popleft()
            free_blocks -= need
            budget -= chunk
            slot = self._admit(request, left, now)
            chunks.append((slot, chunk))
        self._kv_used_blocks = self._spec.kv_blocks - free_blocks
        return chunks

    def _admit(self, request: _Request, left: int, now: float) -> int:
        slot = self._seat(request, now)
        self._load(slot)
        self._pos[slot] = request.pos
        self._gen[slot] = request.generated
        self._ctx[slot] = 0
        self._decoding[slot] = False
        self._order.append(slot)
        self._prefill_left[slot] = left
        return slot

    def _seat(self, request: _Request, now: float) -> int:
        """Give ``request`` a free slot, scheduled at ``now``: all but the slot's arrays."""
        slot = self._free.pop()
        self._slot_request[slot] = request
        self._slot_ids[slot] = request.request_id
        if request.scheduled_ts < 0:
            request.scheduled_ts = now
            # vLLM looks the prompt up in its prefix cache at a request's first admission;
            # the simulated cache never hits.
            self._metrics.counters["vllm:prefix_cache_queries"] += request.prompt_len
        return slot

    def _load(self, slot: int) -> None:
        """The trace and target of the request seated in ``slot``."""
        request = self._slot_request[slot]
        assert request is not None
        trace = request.trace
        length = min(trace.size, self._trace.shape[1])
        self._trace[slot, :length] = trace[:length]
        self._tlen[slot] = length
        self._target[slot] = request.target

    def _decode(self, slots: npt.NDArray[np.intp], k: int, end: float) -> int:
        pos = self._pos
        gen = self._gen
        if k:
            raw = self._trace[slots, pos[slots] % self._tlen[slots]].astype(np.int64)
            np.minimum(raw, k + 1, out=raw)
            self._count_drafts(raw - 1, k, int(slots.size))
        else:
            raw = np.ones(slots.size, dtype=np.int64)
        emitted = np.minimum(raw, self._target[slots] - gen[slots])
        pos[slots] += raw
        gen[slots] += emitted
        self._ctx[slots] += emitted
        itl = end - self._last_ts[slots]
        self._metrics.histograms["vllm:inter_token_latency_seconds"].observe_many(itl)
        self._last_ts[slots] = end
        if self.stepping == "bulk" and self._k_selector is None:
            # A lane walked for this k stays the request's walk one step further on.
            lanes = self._lanes
            for slot in slots.tolist():
                lane = lanes[slot]
                if lane is not None:
                    if lane.cap == k + 1:
                        lane.done += 1
                    else:
                        lanes[slot] = None
        if self.track_tokens:
            ids = self._slot_ids
            self._emitted = tuple(
                (ids[slot], n) for slot, n in zip(slots.tolist(), emitted.tolist(), strict=True)
            )
        else:
            self._emitted = ()
        return int(emitted.sum())

    def _count_drafts(self, accepted: npt.NDArray[np.int64], k: int, drafts: int) -> None:
        """Spec-decode counters for ``drafts`` drafts of k tokens, ``accepted`` by each."""
        counts = np.bincount(accepted, minlength=k + 1)
        tail = np.cumsum(counts[::-1])[::-1]
        metrics = self._metrics
        metrics.accepted_per_position[:k] += tail[1 : k + 1]
        counters = metrics.counters
        counters["vllm:spec_decode_num_drafts"] += drafts
        counters["vllm:spec_decode_num_draft_tokens"] += drafts * k
        counters["vllm:spec_decode_num_accepted_tokens"] += int(accepted.sum())

    def _finish_prefills(self, chunks: list[tuple[int, int]], end: float) -> tuple[int, int]:
        """Requests whose prefill ends get their next token; returns (tokens, prompt tokens).

        The prompt tokens are those vLLM's PrefillStats count: a prompt's computed tokens,
        once, with its first token (never again when a preempted request recomputes).
        """
        first_tokens = 0
        prompt_tokens = 0
        extra: list[tuple[str, int]] = []
        for slot, chunk in chunks:
            self._ctx[slot] += chunk
            left = self._prefill_left[slot] - chunk
            if left:
                self._prefill_left[slot] = left
                continue
            prompt_tokens += self._first_token(slot, end)
            first_tokens += 1
            extra.append((self._slot_ids[slot], 1))
        if self.track_tokens and extra:
            self._emitted = (*self._emitted, *extra)
        return first_tokens, prompt_tokens

    def _first_token(self, slot: int, end: float) -> int:
        """The prefill of ``slot`` is done at ``end``: its next token; the prompt tokens
        that token makes vLLM count (the prompt, at a request's very first token)."""
        del self._prefill_left[slot]
        request = self._slot_request[slot]
        assert request is not None
        self._decoding[slot] = True
        self._gen[slot] += 1
        self._ctx[slot] += 1
        self._last_ts[slot] = end
        lane = request.lane
        if lane is not None and lane.fits(lane.cap, request.pos, int(self._gen[slot])):
            lane.done = 0
            self._lanes[slot] = lane
        if request.first_token_ts >= 0:
            return 0
        request.first_token_ts = end
        self._metrics.histograms["vllm:time_to_first_token_seconds"].observe(end - request.arrival)
        return request.prompt_len

    def _collect_finished(self, end: float) -> tuple[FinishedRequest, ...]:
        if not self._order:
            return ()
        order = np.asarray(self._order)
        done = order[self._gen[order] >= self._target[order]]
        finished = self._finish(done.tolist(), end)
        self._observe_finished(finished)
        return finished

    def _finish(self, slots: Sequence[int], end: float) -> tuple[FinishedRequest, ...]:
        """Requests done at ``end``: their records (kept for take_finished), slots freed."""
        finished = []
        for slot in slots:
            request = self._slot_request[slot]
            assert request is not None
            finished.append(self._record(request, end))
            self._release(slot)
        self._finished.extend(finished)
        return tuple(finished)

    @staticmethod
    def _record(request: _Request | None, end: float) -> FinishedRequest:
        assert request is not None
        # By position, in FinishedRequest's field order: a record per finished request,
        # and keywords cost a third more to pass.
        return FinishedRequest(
            request.request_id,
            request.finish_reason,
            request.prompt_len,
            request.target,
            request.arrival,
            end,
            request.first_token_ts - request.arrival,
            request.scheduled_ts - request.arrival,
            request.first_token_ts - request.scheduled_ts,
            end - request.first_token_ts,
            request.num_preemptions,
            request.max_tokens,
        )

    def _observe_finished(self, records: Sequence[FinishedRequest]) -> None:
        if not records:
            return
        metrics = self._metrics
        success = metrics.labelled["vllm:request_success"]
        for record in records:
            success[record.finish_reason] += 1
        # The records' fields as columns, and from them (by the same float arithmetic as
        # FinishedRequest's properties) one column per histogram of _FINISHED_HISTOGRAMS.
        fields = np.array(
            [
                (
                    r.finished,
                    r.arrival,
                    r.queue_time,
                    r.prefill_time,
                    r.decode_time,
                    r.prompt_tokens,
                    r.output_tokens,
                    r.num_preemptions,
                    r.max_tokens,
                )
                for r in records
            ],
            dtype=np.float64,
        )
        finished, arrival, queue, prefill, decode, prompt, output, preemptions, most = fields.T
        tpot = np.zeros(len(records))
        many = output > 1
        tpot[many] = decode[many] / (output[many] - 1)
        columns = (
            finished - arrival,
            queue,
            prefill,
            decode,
            prefill + decode,
            tpot,
            prompt,
            output,
            preemptions,
            prompt,  # no prefix cache hits
            most,
            np.ones(len(records)),
            output,
        )
        histograms = metrics.histograms
        for name, column in zip(_FINISHED_HISTOGRAMS, columns, strict=True):
            histograms[name].observe_each(column)

    def _release(self, slot: int) -> None:
        self._vacate(slot)
        self._decoding[slot] = False
        self._ctx[slot] = 0
        self._prefill_left.pop(slot, None)
        self._order.remove(slot)

    def _vacate(self, slot: int) -> None:
        """Free a slot but for its arrays and the running order (a stretch writes those
        once, in ``_settle``)."""
        self._slot_request[slot] = None
        self._lanes[slot] = None
        self._free.append(slot)

    def _preempt(self, slot: int, *, count_it: bool) -> None:
        request = self._slot_request[slot]
        assert request is not None
        request.generated = int(self._gen[slot])
        request.pos = int(self._pos[slot])
        lane = self._lanes[slot]
        if lane is not None:
            request.lane = lane.resumed(lane.done)
        self._release(slot)
        self._requeue(request, count_it=count_it)

    def _requeue(self, request: _Request, *, count_it: bool) -> None:
        """A preempted request goes back to the front of the queue."""
        self._waiting.appendleft(request)
        if count_it:
            request.num_preemptions += 1
            self._metrics.counters["vllm:num_preemptions"] += 1

    def _update_gauges(self) -> None:
        """Gauges as the scheduler reports them: KV blocks allocated for the last step."""
        gauges = self._metrics.gauges
        gauges["vllm:num_requests_running"] = len(self._order)
        gauges["vllm:kv_cache_usage_perc"] = self._kv_used_blocks / self._spec.kv_blocks
        self._set_waiting()

    def _set_waiting(self) -> None:
        """Every waiting request waits for capacity: nothing defers one here."""
        self._metrics.gauges["vllm:num_requests_waiting"] = len(self._waiting)
        self._metrics.labelled["vllm:num_requests_waiting_by_reason"]["capacity"] = len(
            self._waiting
        )


class _Requests:
    """An engine's requests as a stretch plans them (specops_lab.sim._stretch.Requests):
    running by admission order, then waiting in queue order, then the closed loop's next
    arrivals, drawn ahead for the mix phase ``phase``; lanes walked ``horizon`` steps on."""

    def __init__(self, engine: SimulatedEngine, phase: int, horizon: int) -> None:
        self._engine = engine
        self._waiting = list(engine._waiting)
        self._phase = phase
        self._horizon = horizon

    def running_lanes(self, cap: int) -> list[Lane]:
        return self._engine._running_lanes(cap, self._horizon)

    def chunk(self, index: int) -> int:
        request = self._request(index)
        return request.prompt_len + request.generated

    def entrant(self, index: int, cap: int) -> Entrant:
        return self._engine._entrant(self._request(index), cap, self._horizon)

    def _request(self, index: int) -> _Request:
        if index < len(self._waiting):
            return self._waiting[index]
        return self._engine._ahead_request(index - len(self._waiting), self._phase)
