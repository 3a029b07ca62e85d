"""Run one policy over one load trace on the simulated engine, in virtual time.

Closed-loop clients hold the trace's concurrency (the engine runs the closed loop itself
between the times anything else happens); the engine, built from the service's truth,
steps; the controller predicts with the service's profile; the driver samples
``vllm:num_requests_running`` every scrape period as a sidecar would, and splits the
figures by trace segment. The controlled policy sees only what the engine's counters
show over each window, and every reconfiguration it orders restarts the engine, which
serves nothing for the suite's restart downtime.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from math import ceil, floor, inf, nextafter

import numpy as np
from pydantic import ValidationError

from specops.control import (
    Action,
    ControlInput,
    ControllerState,
    ControlSettings,
    ServiceModel,
    decide,
    service_window,
)
from specops.control import service_model as build_service_model
from specops.errors import EngineConfigError
from specops.observation import (
    History,
    ObserverConfig,
    SourceObservation,
    observe,
    parse_exposition,
    snapshot_from_reading,
)
from specops.policy import (
    Objective,
    ObjectiveKind,
    SpecConfig,
)
from specops.profiles import PerformanceProfile, get_profile
from specops.vllm import SpeculativeConfig
from specops_lab.bench._spec import BenchError, ControllerSpec, LoadTrace, ServiceSpec
from specops_lab.bench._turbospec import GoodputRule
from specops_lab.sim import (
    EngineConfig,
    EngineTruth,
    FinishedRequest,
    MixPhase,
    SimulatedEngine,
    Workload,
    WorkloadSpec,
    load_truth,
    load_workload,
    parse_speculative_config,
    render_metrics,
)

__all__ = [
    "PRIOR_CONTEXT",
    "ControlledPolicy",
    "DecisionRecord",
    "FixedPolicy",
    "GoodputRulePolicy",
    "Policy",
    "RunResult",
    "SegmentStats",
    "engine_errors",
    "initial_config",
    "load_inputs",
    "phased_workload",
    "run_policy",
    "service_model",
]


# Mean context assumed before any request was measured (prompt plus half the output of
# a chat turn); it only shapes the day-zero table, measurements replace it.
PRIOR_CONTEXT = 700.0


@dataclass(frozen=True)
class FixedPolicy:
    """One speculative config for the whole run (off, a static k, a table)."""

    name: str
    config: SpecConfig


@dataclass(frozen=True)
class GoodputRulePolicy:
    """The per-step goodput rule, drafting up to the service's k_max."""

    name: str


@dataclass(frozen=True)
class ControlledPolicy:
    """specops: the slow loop, from the policy's day-zero config, restarts charged."""

    name: str


Policy = FixedPolicy | GoodputRulePolicy | ControlledPolicy


@dataclass(frozen=True)
class SegmentStats:
    """Figures of one trace segment: tokens made, and the requests that finished in it."""

    name: str
    start: float
    end: float
    tokens: int
    tpots: tuple[float, ...]
    finished_tokens: int
    slo_tokens: int

    @property
    def throughput(self) -> float:
        return self.tokens / (self.end - self.start)

    @property
    def goodput(self) -> float:
        """Throughput times the share of finished tokens whose request met the TPOT target."""
        if self.finished_tokens == 0:
            return 0.0
        return self.throughput * self.slo_tokens / self.finished_tokens


@dataclass(frozen=True)
class DecisionRecord:
    """One decision of the controlled run: ``code`` its reason code, ``k`` the k the
    pods run after it (the cap of a table; 0 is off), ``crossovers`` (k, batch) where
    each candidate k stops paying under the posterior mean (batch None: never), and
    ``crossover_bands`` (k, 10th, 90th percentile) of the same under the posterior."""

    at: float
    action: str
    config: str
    recommended: str | None
    predicted_gain: float | None
    reason: str
    code: str = ""
    k: int = 0
    crossovers: tuple[tuple[int, int | None], ...] = ()
    crossover_bands: tuple[tuple[int, int | None, int | None], ...] = ()


@dataclass(frozen=True)
class RunResult:
    policy: str
    trace: str
    segments: tuple[SegmentStats, ...]
    restarts: int
    timeline: tuple[tuple[float, int, int], ...]
    decisions: tuple[DecisionRecord, ...]
    truth: str
    decide_cpu_s: tuple[float, ...] = ()
    """The CPU seconds each decision took (the process's), in the order of ``decisions``."""


def service_model(service: ServiceSpec, profile: PerformanceProfile) -> ServiceModel:
    """The operator's priors for the service (one builder for both)."""
    return build_service_model(
        profile,
        service.method,
        max_batch=service.max_num_seqs,
        per_batch_size=service.per_batch_size,
        prior_acceptance=service.prior_acceptance,
    )


def objective(service: ServiceSpec) -> Objective:
    return Objective(ObjectiveKind.GOODPUT, tpot_target_s=service.tpot_target_ms / 1e3)


def initial_config(service: ServiceSpec) -> SpecConfig:
    """Day zero as the operator renders a spec without an initial schedule: k = initial."""
    return SpecConfig.static(service.initial_k)


def controller_settings(service: ServiceSpec, spec: ControllerSpec) -> ControlSettings:
    return ControlSettings(
        objective=objective(service),
        k_max=service.k_max,
        min_gain=spec.min_gain,
        margin=spec.margin,
        restart_cost_s=service.restart_downtime_s,
        min_dwell_s=spec.min_dwell_s,
        max_reconfigurations_per_hour=spec.max_reconfigurations_per_hour,
        max_staleness_s=2 * spec.window_s,
        min_drafts=spec.min_drafts,
        rollout_timeout_s=max(4 * service.restart_downtime_s, 2 * spec.window_s),
        regime_min_s=spec.regime_min_s,
        regime_max_s=spec.regime_max_s,
    )


def _vllm(service: ServiceSpec, config: SpecConfig) -> SpeculativeConfig | None:
    if config.is_off:
        return None
    text = json.dumps({"method": service.method, "model": service.draft_model, **config.as_vllm()})
    try:
        return parse_speculative_config(text)
    except EngineConfigError as exc:
        raise BenchError(
            f"config {config.describe()} is not a valid speculative config: {exc}"
        ) from exc


class _Clients:
    """The trace's concurrency at any time, noise included (seeded, so runs compare)."""

    def __init__(self, trace: LoadTrace, seed: int) -> None:
        self._segments = trace.segments
        self._starts = [float(t) for t in np.cumsum([0.0, *(s.duration_s for s in trace.segments)])]
        self._period = trace.noise_period_s
        periods = ceil(trace.duration_s / self._period) + 1
        rng = np.random.default_rng(seed)
        self._noise = np.clip(1.0 + trace.noise * rng.standard_normal(periods), 0.0, None)

    @property
    def boundaries(self) -> list[float]:
        return self._starts

    def _index(self, now: float) -> int:
        return min(bisect_right(self._starts, now) - 1, len(self._segments) - 1)

    def _level(self, now: float) -> float:
        """The concurrency before rounding: the segment's, times the period's noise."""
        index = self._index(now)
        segment = self._segments[index]
        fraction = (now - self._starts[index]) / segment.duration_s
        base = segment.at(min(max(fraction, 0.0), 1.0))
        return base * float(self._noise[int(now // self._period)])

    def target(self, now: float) -> int:
        return max(0, round(self._level(now)))

    def steady_until(self, now: float) -> float:
        """A time after ``now`` before which ``target`` cannot change: the next segment or
        noise period, or, in a ramp, when the concurrency reaches the next rounding."""
        index = self._index(now)
        until = min(self._starts[index + 1], (now // self._period + 1) * self._period)
        segment = self._segments[index]
        if segment.to is not None and segment.to != segment.concurrency:
            noise = float(self._noise[int(now // self._period)])
            slope = (segment.to - segment.concurrency) / segment.duration_s * noise
            level = self._level(now)
            if slope > 0:
                until = min(until, now + (floor(level + 0.5) + 0.5 - level) / slope)
            elif slope < 0:
                until = min(until, now + (ceil(level - 0.5) - 0.5 - level) / slope)
        return max(until, nextafter(now, inf))


@dataclass
class _Pod:
    """The controlled engine as the sidecar and the operator see it: its /metrics page,
    read every scrape, observed over the window, aggregated into the control input."""

    engine: SimulatedEngine
    service: ServiceSpec
    window_s: float
    kv_capacity: int
    history: History

    def scrape(self, now: float) -> None:
        page = render_metrics(
            self.engine.metrics(),
            self.service.draft_model,
            speculative=self.engine.speculative_config is not None,
        )
        self.history.add(snapshot_from_reading(parse_exposition(page.decode(), now)))

    def window(self, now: float, in_force: SpecConfig, ready: bool) -> ControlInput:
        config = ObserverConfig(
            namespace="bench",
            pod="engine",
            service="bench",
            windows_s=(self.window_s,),
            prediction_window_s=self.window_s,
            stale_after_s=2 * self.window_s,
            max_k=self.service.k_max,
            max_batch=self.service.max_num_seqs,
            method=self.service.method,
        )
        source = SourceObservation(kind="direct", target="simulated", up=True, last_success=now)
        pod = observe(self.history.snapshots, now, config, source, self.history.intervals)
        return service_window(
            [pod],
            [],
            window_s=self.window_s,
            in_force=in_force,
            now=now,
            pods_ready=ready,
            kv_capacity_tokens=self.kv_capacity,
            default_context_tokens=PRIOR_CONTEXT,
        ).control_input


def _segment(
    name: str,
    start: float,
    end: float,
    tokens: int,
    finished: list[FinishedRequest],
    target_s: float,
) -> SegmentStats:
    useful = [r for r in finished if r.output_tokens > 1]
    return SegmentStats(
        name=name,
        start=start,
        end=end,
        tokens=tokens,
        tpots=tuple(r.tpot for r in useful),
        finished_tokens=sum(r.output_tokens for r in finished),
        slo_tokens=sum(r.output_tokens for r in finished if r.tpot <= target_s),
    )


def phased_workload(workload: WorkloadSpec, trace: LoadTrace) -> WorkloadSpec:
    """The workload with a mix phase at each segment that sets one."""
    if all(segment.mix is None for segment in trace.segments):
        return workload
    phases: list[MixPhase] = []
    start = 0.0
    weights = dict.fromkeys(workload.components, 1.0)
    for segment in trace.segments:
        weights = segment.mix if segment.mix is not None else weights
        phases.append(MixPhase(start_s=start, weights=weights))
        start += segment.duration_s
    try:
        return WorkloadSpec(
            name=workload.name, components=workload.components, phases=tuple(phases)
        )
    except ValidationError as exc:
        raise BenchError(
            f"trace {trace.name}: segment mixes do not fit the workload {workload.name} "
            f"(phases[i] is segment i's mix): {exc}"
        ) from exc


def _advance(engine: SimulatedEngine, target: int, wake: float, scrapes: Sequence[float]) -> None:
    """Run the engine to ``wake`` with ``target`` clients (their number holds till then),
    noting the running requests at the ``scrapes`` before it (take_samples)."""
    if engine.now < engine.available_at:
        until, concurrency = min(wake, engine.available_at), None
    else:
        until, concurrency = wake, target if engine.has_work else None
    engine.run_until(until, concurrency=concurrency, sample_at=[t for t in scrapes if t < until])


def _run_trace(
    trace: LoadTrace,
    policy: Policy,
    service: ServiceSpec,
    controller: ControllerSpec,
    profile: PerformanceProfile,
    truth: EngineTruth,
    workload: WorkloadSpec,
) -> RunResult:
    model = service_model(service, profile)
    settings = controller_settings(service, controller)
    rule: GoodputRule | None = None
    state: ControllerState | None = None
    if isinstance(policy, FixedPolicy):
        config = policy.config
    elif isinstance(policy, GoodputRulePolicy):
        config = SpecConfig.static(service.k_max)
        rule = GoodputRule()
    else:
        config = initial_config(service)
        state = ControllerState.initial(config)
    engine = SimulatedEngine(
        Workload(phased_workload(workload, trace), seed=service.seed),
        EngineConfig(max_num_seqs=service.max_num_seqs, speculative=_vllm(service, config)),
        truth=truth,
        seed=service.seed,
    )
    engine.step_rule = rule
    pod = _Pod(
        engine,
        service,
        controller.window_s,
        profile.kv_capacity(service.method),
        History(2 * controller.window_s),
    )
    clients = _Clients(trace, seed=service.seed + 1)
    boundaries = clients.boundaries
    end = boundaries[-1]
    target_s = service.tpot_target_ms / 1e3
    measure_from = [b + (trace.warmup_s if trace.sweep else 0.0) for b in boundaries[:-1]]

    segments: list[SegmentStats] = []
    finished: list[FinishedRequest] = []
    timeline: list[tuple[float, int, int]] = []
    decisions: list[DecisionRecord] = []
    decide_cpu_s: list[float] = []
    restarts = 0
    last_k = 0
    index = 0
    opened = False
    tokens_at_open = 0
    next_scrape = 0.0
    next_window = controller.window_s

    while index < len(trace.segments):
        now = engine.now
        if not opened and now >= measure_from[index]:
            opened = True
            tokens_at_open = engine.metrics().counters["vllm:generation_tokens"]
            finished = []
        if now >= boundaries[index + 1]:
            tokens = engine.metrics().counters["vllm:generation_tokens"] - tokens_at_open
            finished.extend(engine.take_finished())
            segments.append(
                _segment(
                    trace.segments[index].name(index),
                    measure_from[index],
                    boundaries[index + 1],
                    tokens,
                    finished,
                    target_s,
                )
            )
            index += 1
            opened = False
            continue
        while now >= next_scrape:
            timeline.append((next_scrape, engine.num_running, last_k))
            if state is not None:
                pod.scrape(now)
            next_scrape += controller.scrape_s
        if state is not None and now >= next_window:
            observation = pod.window(now, state.config, ready=now >= engine.available_at)
            cpu = time.process_time()
            decision = decide(state, observation, model, settings, now)
            decide_cpu_s.append(time.process_time() - cpu)
            state = decision.state
            decisions.append(
                DecisionRecord(
                    at=now,
                    action=decision.action.value,
                    config=decision.config.describe(),
                    recommended=decision.recommended.describe() if decision.recommended else None,
                    predicted_gain=decision.predicted_gain,
                    reason=decision.reason,
                    code=decision.code.value,
                    k=decision.config.num_speculative_tokens,
                    crossovers=tuple((c.k, c.batch) for c in decision.crossovers),
                    crossover_bands=tuple((b.k, b.low, b.high) for b in decision.crossover_bands),
                )
            )
            if decision.action in (Action.RECONFIGURE, Action.ROLLBACK):
                engine.restart(_vllm(service, decision.config), service.restart_downtime_s)
                restarts += 1
            # The operator decides a window after its last decision, sooner while it
            # follows a rollout.
            following = state.rollout is not None
            next_window = now + (controller.rollout_poll_s if following else controller.window_s)
        target = clients.target(now)
        for _ in range(target - engine.num_running - engine.num_waiting):
            engine.add_request()
        wake = min(boundaries[index + 1], measure_from[index] if not opened else end)
        if state is not None:  # the controller reads the pod at every scrape
            wake = min(wake, next_window, next_scrape)
        wake = min(wake, clients.steady_until(now))
        scrapes = []
        while next_scrape < wake:  # a fixed policy's scrapes only sample the load
            scrapes.append(next_scrape)
            next_scrape += controller.scrape_s
        _advance(engine, target, wake, scrapes)
        sampled = engine.take_samples()
        timeline.extend(sampled)
        if len(sampled) < len(scrapes):
            next_scrape = scrapes[len(sampled)]
        last_k = engine.last_k
        finished.extend(engine.take_finished())
    return RunResult(
        policy=policy.name,
        trace=trace.name,
        segments=tuple(segments),
        restarts=restarts,
        timeline=tuple(timeline),
        decisions=tuple(decisions),
        truth=truth.name,
        decide_cpu_s=tuple(decide_cpu_s),
    )


def load_inputs(
    trace: LoadTrace, service: ServiceSpec
) -> tuple[PerformanceProfile, EngineTruth, WorkloadSpec]:
    """The service's profile and truth and the trace's workload; errors name the trace."""
    try:
        return (
            get_profile(service.profile),
            load_truth(service.truth),
            load_workload(trace.workload),
        )
    except (EngineConfigError, KeyError) as exc:
        raise BenchError(f"trace {trace.name}: {exc}") from exc


@contextmanager
def engine_errors(where: str) -> Iterator[None]:
    """The simulated engine's refusal of an input that only a run meets (a prompt longer
    than the model's context, ...) as a BenchError that says which suite entry to fix."""
    try:
        yield
    except EngineConfigError as exc:
        raise BenchError(
            f"{where}: {exc}; fix the trace's workload, or the suite's service or truths"
        ) from exc


def run_policy(
    trace: LoadTrace, policy: Policy, service: ServiceSpec, controller: ControllerSpec
) -> RunResult:
    """A whole trace; a sweep runs each segment on a fresh engine and joins the figures."""
    with engine_errors(f"trace {trace.name} on truth {service.truth}, policy {policy.name}"):
        return _run_policy(trace, policy, service, controller)


def _run_policy(
    trace: LoadTrace, policy: Policy, service: ServiceSpec, controller: ControllerSpec
) -> RunResult:
    profile, truth, workload = load_inputs(trace, service)
    if not trace.sweep:
        return _run_trace(trace, policy, service, controller, profile, truth, workload)
    parts = [
        _run_trace(
            trace.model_copy(update={"segments": (segment,)}),
            policy,
            service,
            controller,
            profile,
            truth,
            workload,
        )
        for segment in trace.segments
    ]
    offset = 0.0
    timeline: list[tuple[float, int, int]] = []
    decisions: list[DecisionRecord] = []
    for part, segment in zip(parts, trace.segments, strict=True):
        timeline.extend((t + offset, running, k) for t, running, k in part.timeline)
        decisions.extend(replace(d, at=d.at + offset) for d in part.decisions)
        offset += segment.duration_s
    return RunResult(
        policy=policy.name,
        trace=trace.name,
        segments=tuple(
            replace(p.segments[0], name=s.name(i))
            for i, (p, s) in enumerate(zip(parts, trace.segments, strict=True))
        ),
        restarts=sum(p.restarts for p in parts),
        timeline=tuple(timeline),
        decisions=tuple(decisions),
        truth=truth.name,
        decide_cpu_s=tuple(cpu for part in parts for cpu in part.decide_cpu_s),
    )
