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
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import count

import numpy as np
import numpy.typing as npt

from specops.errors import EngineConfigError, SpecValidationError
from specops.profiles import DraftFamily, draft_family
from specops.sim._metrics import EngineMetrics, MetricsRecorder
from specops.sim._truth import DEFAULT_TRUTH, EngineStep, EngineTruth, load_truth
from specops.sim._workload import Workload
from specops.vllm import DYNAMIC_SCHEDULE_METHODS, SpeculativeConfig

__all__ = [
    "EngineConfig",
    "FinishedRequest",
    "SimulatedEngine",
    "StepResult",
    "k_lookup_table",
    "parse_speculative_config",
]

_log = logging.getLogger(__name__)


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
        "last_token_ts",
        "max_tokens",
        "num_preemptions",
        "pos",
        "prompt_len",
        "request_id",
        "scheduled_ts",
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
        trace: npt.NDArray[np.int32],
    ) -> None:
        self.request_id = request_id
        self.arrival = arrival
        self.prompt_len = prompt_len
        self.target = target
        self.max_tokens = max_tokens
        self.finish_reason = finish_reason
        self.trace = trace
        self.generated = 0
        self.pos = 0
        self.scheduled_ts = -1.0
        self.first_token_ts = -1.0
        self.last_token_ts = -1.0
        self.num_preemptions = 0


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
    ``slowdown`` multiplies every step (a slower pod: the truth's ``slow_pod_factor``).
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
    ) -> None:
        if slowdown <= 0:
            raise EngineConfigError(f"slowdown must be > 0, got {slowdown}")
        self.truth = load_truth(DEFAULT_TRUTH) if truth is None else truth
        self.slowdown = slowdown
        self._rng = np.random.default_rng(seed)
        self.workload = workload
        self.config = config
        self.track_tokens = track_tokens
        # An in-engine k rule (scheduled requests, cap) -> k, replacing the table for
        # baselines vLLM does not ship, such as a per-step goodput rule.
        self.k_selector: Callable[[int, int], int] | None = None
        self.now = 0.0
        self.available_at = 0.0
        self._ids = count()
        self._finished: list[FinishedRequest] = []
        self._waiting: deque[_Request] = deque()
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
        return _Speculation(
            method=method,
            family=family,
            k_max=k_max,
            lookup=lookup,
            kv_blocks=kv_tokens // self.config.block_size,
        )

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
        drawn = self.workload.draw(arrival, self._spec.family)
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
        request_id = request_id or f"cmpl-{next(self._ids)}"
        self._waiting.append(
            _Request(request_id, arrival, prompt, target, limit, reason, drawn.trace)
        )
        self._set_waiting()
        return request_id

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
    def has_work(self) -> bool:
        return bool(self._order or self._waiting)

    def metrics(self) -> EngineMetrics:
        return self._metrics.snapshot()

    def take_finished(self) -> list[FinishedRequest]:
        """Requests finished since the last call, oldest first."""
        finished, self._finished = self._finished, []
        return finished

    # -- time --------------------------------------------------------------------------

    def run_until(self, until: float) -> int:
        """Step while there is work and the clock is before ``until``; idle time jumps.

        The last step may end past ``until`` (steps are not cut). Returns steps taken.
        """
        steps = 0
        while self.now < until:
            if self.now < self.available_at:
                self.now = min(until, self.available_at)
                continue
            if not self.has_work:
                self.now = until
                break
            self.step()
            steps += 1
        return steps

    def step(self) -> StepResult:
        """Run one engine step starting at ``now`` (or when the engine is back up)."""
        self.now = max(self.now, self.available_at)
        start = self.now
        spec = self._spec
        block = self.config.block_size
        lookahead = 1 + spec.k_max
        ctx = self._ctx
        self._fit_running_in_kv(block, lookahead)
        decoding = np.flatnonzero(self._decoding)
        budget = self.config.max_num_batched_tokens - decoding.size * lookahead
        chunks = self._schedule_prefills(start, budget, block, lookahead)
        scheduled = decoding.size + len(chunks)
        if spec.k_max == 0 or decoding.size == 0:
            k = 0
        elif self.k_selector is not None:
            k = max(0, min(self.k_selector(scheduled, spec.k_max), spec.k_max))
        elif spec.lookup is not None:
            k = spec.lookup[scheduled]
        else:
            k = spec.k_max
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
        end = start + self._step_seconds(shape)
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
        emitted: tuple[tuple[str, int], ...] = ()
        if self.track_tokens:
            emitted = self._emitted
        finished = tuple(self._collect_finished(end))
        self._update_gauges()
        return StepResult(start, end, int(decoding.size), prefill_tokens, k, emitted, finished)

    # -- step internals ----------------------------------------------------------------

    def _step_seconds(self, shape: EngineStep) -> float:
        seconds = self.truth.step_time(shape) * self.slowdown
        sigma = self.truth.jitter_sigma
        if sigma > 0:
            seconds *= float(np.exp(sigma * self._rng.standard_normal() - sigma * sigma / 2))
        return seconds

    def _used_blocks(self, block: int, lookahead: int) -> int:
        if not self._order:
            return 0
        ctx = self._ctx[self._order]
        return int(((ctx + lookahead + block - 1) // block).sum())

    def _fit_running_in_kv(self, block: int, lookahead: int) -> None:
        capacity = self._spec.kv_blocks
        while self._order and self._used_blocks(block, lookahead) > capacity:
            self._preempt(self._order[-1], count_it=True)

    def _schedule_prefills(
        self, now: float, budget: int, block: int, lookahead: int
    ) -> list[tuple[int, int]]:
        chunks: list[tuple[int, int]] = []
        for slot, left in self._prefill_left.items():
            if budget <= 0:
                break
            chunk = min(left, budget)
            chunks.append((slot, chunk))
            budget -= chunk
        free_blocks = self._spec.kv_blocks - self._used_blocks(block, lookahead)
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
        slot = self._free.pop()
        trace = request.trace
        length = min(trace.size, self._trace.shape[1])
        self._trace[slot, :length] = trace[:length]
        self._tlen[slot] = length
        self._pos[slot] = request.pos
        self._gen[slot] = request.generated
        self._target[slot] = request.target
        self._ctx[slot] = 0
        self._decoding[slot] = False
        self._slot_request[slot] = request
        self._slot_ids[slot] = request.request_id
        self._order.append(slot)
        self._prefill_left[slot] = left
        if request.scheduled_ts < 0:
            request.scheduled_ts = now
            # vLLM looks the prompt up in its prefix cache at a request's first admission;
            # the simulated cache never hits.
            self._metrics.counters["vllm:prefix_cache_queries"] += request.prompt_len
        return slot

    def _decode(self, slots: npt.NDArray[np.intp], k: int, end: float) -> int:
        pos = self._pos
        gen = self._gen
        if k:
            raw = self._trace[slots, pos[slots] % self._tlen[slots]].astype(np.int64)
            np.minimum(raw, k + 1, out=raw)
            accepted = raw - 1
            counts = np.bincount(accepted, minlength=k + 1)
            tail = np.cumsum(counts[::-1])[::-1]
            metrics = self._metrics
            metrics.accepted_per_position[:k] += tail[1 : k + 1]
            counters = metrics.counters
            counters["vllm:spec_decode_num_drafts"] += int(slots.size)
            counters["vllm:spec_decode_num_draft_tokens"] += int(slots.size) * k
            counters["vllm:spec_decode_num_accepted_tokens"] += int(accepted.sum())
        else:
            raw = np.ones(slots.size, dtype=np.int64)
        emitted = np.minimum(raw, self._target[slots] - gen[slots])
        pos[slots] += raw
        gen[slots] += emitted
        self._ctx[slots] += emitted
        itl = end - self._last_ts[slots]
        self._metrics.histograms["vllm:inter_token_latency_seconds"].observe_many(itl)
        self._last_ts[slots] = end
        if self.track_tokens:
            ids = self._slot_ids
            self._emitted = tuple(
                (ids[slot], n) for slot, n in zip(slots.tolist(), emitted.tolist(), strict=True)
            )
        else:
            self._emitted = ()
        return int(emitted.sum())

    def _finish_prefills(self, chunks: list[tuple[int, int]], end: float) -> tuple[int, int]:
        """Requests whose prefill ends get their next token; returns (tokens, prompt tokens).

        The prompt tokens are those vLLM's PrefillStats count: a prompt's computed tokens,
        once, with its first token (never again when a preempted request recomputes).
        """
        first_tokens = 0
        prompt_tokens = 0
        metrics = self._metrics
        extra: list[tuple[str, int]] = []
        for slot, chunk in chunks:
            self._ctx[slot] += chunk
            left = self._prefill_left[slot] - chunk
            if left:
                self._prefill_left[slot] = left
                continue
            del self._prefill_left[slot]
            request = self._slot_request[slot]
            assert request is not None
            self._decoding[slot] = True
            self._gen[slot] += 1
            self._ctx[slot] += 1
            self._last_ts[slot] = end
            first_tokens += 1
            extra.append((request.request_id, 1))
            if request.first_token_ts < 0:
                request.first_token_ts = end
                prompt_tokens += request.prompt_len
                metrics.histograms["vllm:time_to_first_token_seconds"].observe(
                    end - request.arrival
                )
        if self.track_tokens and extra:
            self._emitted = (*self._emitted, *extra)
        metrics.counters["vllm:prompt_tokens"] += prompt_tokens
        metrics.labelled["vllm:prompt_tokens_by_source"]["local_compute"] += prompt_tokens
        return first_tokens, prompt_tokens

    def _collect_finished(self, end: float) -> list[FinishedRequest]:
        if not self._order:
            return []
        order = np.asarray(self._order)
        done = order[self._gen[order] >= self._target[order]]
        finished = []
        for slot in done.tolist():
            request = self._slot_request[slot]
            assert request is not None
            output = int(self._gen[slot])
            record = FinishedRequest(
                request_id=request.request_id,
                finish_reason=request.finish_reason,
                prompt_tokens=request.prompt_len,
                output_tokens=output,
                arrival=request.arrival,
                finished=end,
                ttft=request.first_token_ts - request.arrival,
                queue_time=request.scheduled_ts - request.arrival,
                prefill_time=request.first_token_ts - request.scheduled_ts,
                decode_time=end - request.first_token_ts,
                num_preemptions=request.num_preemptions,
                max_tokens=request.max_tokens,
            )
            self._observe_finished(record)
            self._release(slot)
            finished.append(record)
        self._finished.extend(finished)
        return finished

    def _observe_finished(self, record: FinishedRequest) -> None:
        metrics = self._metrics
        metrics.labelled["vllm:request_success"][record.finish_reason] += 1
        histograms = metrics.histograms
        for name, value in (
            ("vllm:e2e_request_latency_seconds", record.e2e_latency),
            ("vllm:request_queue_time_seconds", record.queue_time),
            ("vllm:request_prefill_time_seconds", record.prefill_time),
            ("vllm:request_decode_time_seconds", record.decode_time),
            ("vllm:request_inference_time_seconds", record.prefill_time + record.decode_time),
            ("vllm:request_time_per_output_token_seconds", record.tpot),
            ("vllm:request_prompt_tokens", record.prompt_tokens),
            ("vllm:request_generation_tokens", record.output_tokens),
            ("vllm:request_num_preemptions", record.num_preemptions),
            ("vllm:request_prefill_kv_computed_tokens", record.prompt_tokens),  # no cache hits
            ("vllm:request_params_max_tokens", record.max_tokens),
            ("vllm:request_params_n", 1),
            ("vllm:request_max_num_generation_tokens", record.output_tokens),
        ):
            histograms[name].observe(value)

    def _release(self, slot: int) -> None:
        self._slot_request[slot] = None
        self._decoding[slot] = False
        self._ctx[slot] = 0
        self._prefill_left.pop(slot, None)
        self._order.remove(slot)
        self._free.append(slot)

    def _preempt(self, slot: int, *, count_it: bool) -> None:
        request = self._slot_request[slot]
        assert request is not None
        request.generated = int(self._gen[slot])
        request.pos = int(self._pos[slot])
        self._release(slot)
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
