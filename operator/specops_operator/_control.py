"""The slow control loop's shell: measure, restore state, decide, write, report.

One tick for one SpeculativeService reads everything it needs from the API (the object,
its Deployment, its pods), fetches the pods' observations, restores the controller's
state from status, calls the pure :func:`specops.control.decide` with ``now`` from an
injected clock, and applies the status fields it owns as their one writer
(:mod:`specops_operator._owners`): ``status.controller`` (the state), ``status.lastDecision``,
``status.lastMeasurements`` and the ``MetricsAvailable`` condition. The apply is skipped when
the object holds all of these already but for the decision's and the window's times (a hold
on the same state): a restarted operator resumes from the same state, and decides at once,
as the time on the object is that of the last decision written. A change applied in mode
Auto is handed to a reconciliation at once, which renders the Deployment (a rolling update
with maxUnavailable 0) and records it in ``status.speculativeConfig`` (source Controller).
Events are posted when the action or reason changes, metrics on every decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ParamSpec, TypeVar

from prometheus_client import Gauge

from specops.api import (
    DecisionStatus,
    SpeculativeService,
    SpeculativeServiceSpec,
    SpeculativeServiceStatus,
    parse_service,
)
from specops.control import (
    Action,
    CanaryReport,
    ControlSettings,
    Decision,
    Mode,
    ServiceModel,
    decide,
    service_model,
    service_window,
)
from specops.control import ServiceWindow as Window
from specops.policy import Objective, ObjectiveKind, SpecConfig, TpotSpread
from specops.profiles import PerformanceProfile
from specops.render import (
    CANARY_LABEL,
    HASH_ANNOTATION,
    RenderOptions,
    apply_defaults,
    canary_in_force,
    config_allowed,
    data_parallel_size,
    performance_profile,
    speculation_choice,
    speculation_in_force,
    speculative_config_status,
)
from specops_operator._fetch import Fetched, ObservationSource, ready_pods
from specops_operator._kube import Kube
from specops_operator._metrics import (
    CANARY_GAIN,
    CROSSOVER_BAND,
    CROSSOVER_BATCH_SIZE,
    DECISIONS,
    MODE,
    PREDICTED_GAIN,
    PRIOR_CROSSOVER,
    RECONFIGURATIONS,
    ROLLBACKS,
    SPECULATIVE_TOKENS,
    STEP_TIME_INTERVALS,
    TPOT_SPREAD,
)
from specops_operator._owners import Writer, owned_status, status_apply
from specops_operator._reconcile import planned, reconcile
from specops_operator._state import restore_state, save_state, timestamp, unix_time
from specops_operator._status import rollout_complete

__all__ = [
    "ControlLoopOptions",
    "PostEvent",
    "TickPlan",
    "control_settings",
    "control_tick",
    "decision_status",
    "deployment_ready",
    "forget_decisions",
    "plan_tick",
    "to_thread_to_end",
]

log = logging.getLogger("specops.control")

Obj = dict[str, Any]
# The pods of one service that carry every label of a selector.
PodLister = Callable[[Mapping[str, str]], Sequence[Mapping[str, Any]]]
# (type "Normal" or "Warning", reason, message)
PostEvent = Callable[[Mapping[str, Any], str, str, str], None]
_MODES = tuple(m.value for m in Mode)
# When each service last decided, for decisions whose status apply was skipped: the object
# still holds the time of an earlier one, and the next is due a window after this one.
_DECIDED: dict[tuple[str, str], float] = {}


_P = ParamSpec("_P")
_R = TypeVar("_R")


async def to_thread_to_end(call: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """``asyncio.to_thread``, except that a cancelled caller ends only once ``call`` returned.

    kopf cancels a deleted service's loop at once (a cancellation timeout, no backoff) and
    takes off its finalizer once the loop has ended. A call cut loose on its thread would
    write on after that, and after the loop forgot the service: its Deployment applied (made
    again if already collected), its status applied, its reconciliations' turn lock made
    again."""
    running = asyncio.ensure_future(asyncio.to_thread(call, *args, **kwargs))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # the outcome: of no use to a cancelled caller
            await running
        raise


@dataclass(frozen=True)
class ControlLoopOptions:
    """Operator-wide settings of the loop; ``period_s`` overrides each spec's window."""

    source: ObservationSource
    clock: Callable[[], float] = field(default=time.time)
    period_s: float | None = None
    initial_delay_s: float = 30.0
    rollout_poll_s: float = 15.0
    status_poll_s: float = 2.0
    retry_s: float = 30.0
    default_context_tokens: float = 1024.0


def control_settings(spec: SpeculativeServiceSpec) -> ControlSettings:
    """The spec's policy knobs for the pure loop."""
    policy, tokens = spec.policy, spec.speculation.num_speculative_tokens
    target = policy.tpot_target_milliseconds
    scrape = spec.metrics.scrape_interval_seconds
    return ControlSettings(
        mode=Mode(spec.speculation.mode),
        objective=Objective(
            ObjectiveKind(policy.objective), tpot_target_s=target / 1e3 if target else None
        ),
        k_min=tokens.min,
        k_max=tokens.max,
        min_gain=policy.min_gain_percent / 100.0,
        restart_cost_s=float(policy.restart_cost_seconds),
        margin=policy.restart_margin,
        min_dwell_s=float(policy.min_dwell_seconds),
        max_reconfigurations_per_hour=policy.max_reconfigurations_per_hour,
        max_staleness_s=float(max(4 * scrape, 60)),
        rollout_timeout_s=float(policy.rollout_timeout_seconds),
        rollback_cooldown_s=float(policy.rollback_cooldown_seconds),
        canary=policy.canary.enabled,
        canary_windows=policy.canary.windows,
        canary_max_windows=policy.canary.max_windows,
    )


def deployment_ready(live: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """Whether the live Deployment runs the desired template on all its pods, all Ready."""
    if live is None:
        return False
    hashes = [
        (o.get("metadata", {}).get("annotations") or {}).get(HASH_ANNOTATION)
        for o in (live, desired)
    ]
    return hashes[0] == hashes[1] and rollout_complete(live, desired["spec"]["replicas"])


def _config_status(spec: SpeculativeServiceSpec, config: SpecConfig) -> Obj:
    """status.speculativeConfig for a config the controller chose."""
    chosen = speculative_config_status(spec, config, "Controller")
    return chosen.model_dump(by_alias=True, exclude_none=True, mode="json")


def _crossovers(decision: Decision) -> list[Obj]:
    bands = {b.k: b for b in decision.crossover_bands}
    return [
        {
            "k": c.k,
            "batchSize": c.batch,
            "batchSizeLow": bands[c.k].low if c.k in bands else None,
            "batchSizeHigh": bands[c.k].high if c.k in bands else None,
        }
        for c in decision.crossovers
    ]


def _step_time_model(decision: Decision) -> Obj:
    evidence = decision.state.cost_evidence
    return {
        "source": "Measured" if decision.cost_measured else "Prior",
        "intervals": evidence.points,
        "steps": round(evidence.steps),
        "draftingKs": list(evidence.ks),
    }


def _percent(value: float | None) -> float | None:
    return round(value * 100, 3) if value is not None else None


def _canary_result(report: CanaryReport | None) -> Obj | None:
    """lastDecision.canary: what the canary measured beside the fleet."""
    if report is None:
        return None
    return {
        "speculativeConfig": speculation_choice(report.config).model_dump(
            by_alias=True, exclude_none=True, mode="json"
        ),
        "baseline": speculation_choice(report.baseline).model_dump(
            by_alias=True, exclude_none=True, mode="json"
        ),
        "windows": report.windows,
        "measuredGainPercent": _percent(report.gain),
        "lowGainPercent": _percent(report.low),
        "highGainPercent": _percent(report.high),
        "predictedGainPercent": _percent(report.predicted_gain),
        "verdict": report.verdict.value,
    }


def decision_status(spec: SpeculativeServiceSpec, decision: Decision) -> Obj:
    """status.lastDecision; a key without a value is null, and left out of the apply (which
    removes what the last decision had there)."""
    gain = decision.predicted_gain
    return {
        "time": timestamp(decision.at),
        "action": decision.action.value,
        "reasonCode": decision.code.value,
        "reason": decision.reason[:4096],
        "predictedGainPercent": _percent(gain),
        "gainSeconds": round(decision.gain_s, 1) if decision.gain_s is not None else None,
        "restartCostSeconds": round(decision.restart_cost_s, 1),
        "likelyGainPercent": _percent(decision.likely_gain),
        "stepTimeModel": _step_time_model(decision),
        "crossovers": _crossovers(decision),
        "applied": decision.applied,
        "recommended": _config_status(spec, decision.recommended)
        if decision.recommended is not None
        else None,
        "canary": _canary_result(decision.canary),
    }


def _measurements(window: Window, decision: Decision, k: int) -> Obj:
    crossover = next((c.batch for c in decision.crossovers if c.k == k), None)
    return {
        "time": timestamp(window.control_input.window_end),
        "windowSeconds": round(window.window_s),
        "concurrency": window.concurrency,
        "acceptanceLength": window.acceptance_length,
        # Corrected for positions a per-batch-size table did not draft, as the controller
        # reads it; the raw share accepted_i / drafts only where the decision measured none.
        "acceptancePerPosition": list(
            decision.window_acceptance.rates
            if decision.window_acceptance is not None
            else window.acceptance_per_position
        )
        or None,
        "tpotSeconds": window.tpot_s,
        "throughputTokensPerSecond": window.throughput_per_pod,
        "crossoverConcurrency": crossover,
        "draftedTokensPerDraft": window.drafted_tokens_per_draft,
    }


def _metrics_condition(
    current: list[Obj], window: Window, now: float, generation: int | None
) -> Obj:
    """MetricsAvailable, the control loop's condition (its time kept if its status is)."""
    status = "True" if window.available else "False"
    before = next((c for c in current if c.get("type") == "MetricsAvailable"), None)
    since = (
        before.get("lastTransitionTime", timestamp(now))
        if before is not None and before.get("status") == status
        else timestamp(now)
    )
    metrics = {
        "type": "MetricsAvailable",
        "status": status,
        "reason": window.reason,
        "message": window.message[:32768],
        "lastTransitionTime": since,
    }
    return metrics if generation is None else {**metrics, "observedGeneration": generation}


def _set_or_drop(gauge: Gauge, labels: tuple[str, ...], batch: int | None) -> None:
    """A crossover's gauge, or no series when k never stops paying up to the limit."""
    if batch is not None:
        gauge.labels(*labels).set(batch)
    else:
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)


def _report_crossovers(namespace: str, name: str, decision: Decision) -> None:
    """Each k's crossover learned, its band under the posterior, and the prior's."""
    for crossover in decision.crossovers:
        _set_or_drop(CROSSOVER_BATCH_SIZE, (namespace, name, str(crossover.k)), crossover.batch)
    for crossover in decision.prior_crossovers:
        _set_or_drop(PRIOR_CROSSOVER, (namespace, name, str(crossover.k)), crossover.batch)
    for band in decision.crossover_bands:
        for quantile, batch in (("0.1", band.low), ("0.9", band.high)):
            _set_or_drop(CROSSOVER_BAND, (namespace, name, str(band.k), quantile), batch)


def _report_spread(namespace: str, name: str, spread: TpotSpread) -> None:
    """The spread's two terms under the source they came from; the other source's dropped."""
    source, other = ("measured", "prior") if spread.measured_from > 0 else ("prior", "measured")
    for term, value in (("base", spread.base), ("heterogeneity", spread.heterogeneity)):
        TPOT_SPREAD.labels(namespace, name, term, source).set(value)
        with contextlib.suppress(KeyError):
            TPOT_SPREAD.remove(namespace, name, term, other)


def _report_canary(namespace: str, name: str, canary: CanaryReport) -> None:
    for quantity, value in (
        ("measured", canary.gain),
        ("low", canary.low),
        ("high", canary.high),
        ("predicted", canary.predicted_gain),
    ):
        if value is not None:
            CANARY_GAIN.labels(namespace, name, quantity).set(value)


def _report(namespace: str, name: str, mode: str, decision: Decision) -> None:
    """The decision in the log and the operator's metrics."""
    log.info(
        "%s/%s: %s (%s) %s",
        namespace,
        name,
        decision.action.value,
        decision.code.value,
        decision.reason,
    )
    DECISIONS.labels(namespace, name, decision.action.value, decision.code.value).inc()
    for each in _MODES:
        MODE.labels(namespace, name, each).set(1.0 if each == mode else 0.0)
    SPECULATIVE_TOKENS.labels(namespace, name).set(decision.config.num_speculative_tokens)
    if decision.predicted_gain is not None:
        PREDICTED_GAIN.labels(namespace, name).set(decision.predicted_gain)
    STEP_TIME_INTERVALS.labels(namespace, name).set(decision.state.cost_evidence.points)
    _report_crossovers(namespace, name, decision)
    if decision.canary is not None:
        _report_canary(namespace, name, decision.canary)
    if decision.tpot_spread is not None:
        _report_spread(namespace, name, decision.tpot_spread)
    if decision.action is Action.RECONFIGURE:
        RECONFIGURATIONS.labels(namespace, name).inc()
    elif decision.action is Action.ROLLBACK:
        ROLLBACKS.labels(namespace, name).inc()


def _wait(service: SpeculativeService, options: ControlLoopOptions, now: float) -> float:
    """Seconds until the next decision is due (sooner while a rollout is followed)."""
    spec = service.spec
    period = options.period_s or float(spec.policy.evaluation_window_seconds)
    status = service.status
    if status is not None and status.controller is not None and status.controller.rollout:
        period = min(period, options.rollout_poll_s)
    last = status.last_decision if status is not None else None
    times = [unix_time(last.time)] if last is not None else []
    times += [_DECIDED[key]] if (key := _key(service)) in _DECIDED else []
    if not times:
        return 0.0
    return max(period - (now - max(times)), 0.0)


def _key(service: SpeculativeService) -> tuple[str, str]:
    return service.metadata.namespace, service.metadata.name


def forget_decisions(namespace: str, name: str) -> None:
    """A deleted service's last decision time is of no use; one made again starts afresh."""
    _DECIDED.pop((namespace, name), None)


def _news(status: Mapping[str, Any]) -> Obj:
    """The control loop's status without what changes at every decision and says nothing
    new: the times of the decision and of the window measured."""
    news = dict(status)
    for field_ in ("lastDecision", "lastMeasurements"):
        if isinstance(news.get(field_), Mapping):
            news[field_] = {k: v for k, v in news[field_].items() if k != "time"}
    return news


def _unchanged(owned: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """Whether the object already holds every field of the control loop's apply ``owned``
    (controller state, decision, measurements, MetricsAvailable), times aside: then the
    apply would change nothing a reader or a restarted operator needs."""
    held = owned_status(body.get("status") or {}, Writer.CONTROLLER)
    return _news(owned) == _news(held)


def _next_tick(due_in: float, sampling_interval: float | None) -> float:
    """Wake for the next decision, or sooner when the source needs a reading before it."""
    return due_in if sampling_interval is None else min(due_in, sampling_interval)


@dataclass(frozen=True)
class TickPlan:
    """What one decision writes: the control loop's status fields, and the event to post
    (type, reason, message; None when the action and its reason are the last decision's).
    ``choice``: the new ``status.speculativeConfig`` when the speculation in force changes,
    handed to a reconciliation at once (None when it stays); ``render``: the pods change
    (a new choice, or a canary started or ended), so a reconciliation runs now."""

    decision: Decision
    status: Obj
    choice: Obj | None
    event: tuple[str, str, str] | None
    render: bool = False


def _service_model(
    spec: SpeculativeServiceSpec, profile: PerformanceProfile | None
) -> ServiceModel | None:
    """What is known of the service unmeasured: the profile's costs; None without one."""
    if profile is None:
        return None
    return service_model(
        profile,
        spec.speculation.method,
        max_batch=spec.engine.max_num_seqs,
        per_batch_size=spec.speculation.per_batch_size_schedule,
        data_parallel=data_parallel_size(spec),
        replicas=spec.replicas,
    )


def _event(
    previous: DecisionStatus | None, decision: Decision, recommended: Obj | None
) -> tuple[str, str, str] | None:
    """An event when the action, its reason or the config recommended changes; a rollback
    is a warning. Two reconfigurations in a row for the same reason are two events."""
    if previous is not None and (
        previous.action,
        previous.reason_code,
        previous.recommended.model_dump(by_alias=True, mode="json")
        if previous.recommended is not None
        else None,
    ) == (decision.action.value, decision.code.value, recommended):
        return None
    kind = "Warning" if decision.action is Action.ROLLBACK else "Normal"
    return kind, decision.action.value, f"{decision.code.value}: {decision.reason}"


def plan_tick(
    body: Mapping[str, Any],
    status: SpeculativeServiceStatus,
    in_force: SpecConfig,
    spec: SpeculativeServiceSpec,
    fetched: Fetched,
    pods_ready: bool,
    now: float,
    default_context_tokens: float,
    canary: Fetched | None = None,
) -> TickPlan:
    """The decision on the measurements, and what it writes (pure).

    ``status`` is ``body``'s, parsed, and ``in_force`` its speculative config; ``spec`` is
    the object's spec with the defaults applied; ``canary`` the canary pods' observations
    while one runs.
    """
    profile = performance_profile(spec)
    state = restore_state(status.controller, in_force, partial(config_allowed, spec))

    def window_of(observed: Fetched, config: SpecConfig, ready: bool) -> Window:
        return service_window(
            observed.observations,
            observed.failures,
            window_s=float(spec.policy.evaluation_window_seconds),
            in_force=config,
            now=now,
            pods_ready=ready,
            kv_capacity_tokens=profile.kv_capacity(spec.speculation.method) if profile else None,
            default_context_tokens=default_context_tokens,
        )

    window = window_of(fetched, in_force, pods_ready)
    measured = window.control_input
    if state.canary is not None and canary is not None:
        beside = window_of(canary, state.canary.config, True).control_input
        measured = replace(measured, canary=beside)
    decision = decide(state, measured, _service_model(spec, profile), control_settings(spec), now)
    live_status = body.get("status") or {}
    last_decision = decision_status(spec, decision)
    generation = (body.get("metadata") or {}).get("generation")
    conditions = list(live_status.get("conditions") or [])
    owned: Obj = {
        "controller": save_state(decision.state).model_dump(by_alias=True, mode="json"),
        "lastDecision": last_decision,
        "conditions": [_metrics_condition(conditions, window, now, generation)],
        # Without a reading the last one stays: it is sent again, as the apply keeps only
        # what it is sent.
        "lastMeasurements": _measurements(window, decision, in_force.num_speculative_tokens)
        if window.available
        else live_status.get("lastMeasurements"),
    }
    choice = _config_status(spec, decision.config) if decision.config != in_force else None
    event = _event(status.last_decision, decision, last_decision["recommended"])
    render = choice is not None or (state.canary is None) != (decision.state.canary is None)
    return TickPlan(decision, owned, choice, event, render)


def _is_canary(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata", {}).get("labels") or {}).get(CANARY_LABEL) == "true")


async def _measure(
    kube: Kube,
    namespace: str,
    name: str,
    service: SpeculativeService,
    spec: SpeculativeServiceSpec,
    options: ControlLoopOptions,
    render: RenderOptions,
    listed: PodLister | None,
) -> tuple[Fetched, Fetched | None, bool]:
    """The pods' observations (a canary's apart, while one is rendered), and whether the
    Deployment's rollout of the rendered template is complete. The pods come from
    ``listed`` (the operator's watch of owned pods) or, without it, from the API server."""
    wanted, live = await to_thread_to_end(planned, kube, service, render)
    desired = next(
        o for o in wanted.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name
    )
    pods: Sequence[Mapping[str, Any]] = (
        listed(wanted.selector)
        if listed is not None
        else await to_thread_to_end(kube.list_pods, namespace, wanted.selector)
    )
    fleet = ready_pods([p for p in pods if not _is_canary(p)])
    fetched = await options.source.fetch(namespace, name, spec, fleet)
    canary = None
    if wanted.canary is not None:
        canary_pods = ready_pods([p for p in pods if _is_canary(p)])
        canary = await options.source.fetch(namespace, name, spec, canary_pods, canary=True)
    return fetched, canary, deployment_ready(live, desired)


async def control_tick(
    kube: Kube,
    namespace: str,
    name: str,
    options: ControlLoopOptions,
    render: RenderOptions,
    post_event: PostEvent,
    pods: PodLister | None = None,
) -> float:
    """Decide for one SpeculativeService if a decision is due; the seconds to wait after.
    ``pods`` lists the service's pods by a label selector (the API server's list without)."""
    body = await to_thread_to_end(kube.get_service, namespace, name)
    if body is None:
        return options.retry_s
    service = parse_service(body)
    now = options.clock()
    if service.status is None or service.status.speculative_config is None:
        return options.status_poll_s  # not reconciled yet: its first status is moments away
    due_in = _wait(service, options, now)
    spec = apply_defaults(service.spec)
    if due_in > 0:
        canary_runs = canary_in_force(spec, service.status) is not None
        await options.source.sample(namespace, name, spec, canary=canary_runs)
        return _next_tick(due_in, options.source.sampling_interval(spec))
    fetched, canary, pods_ready = await _measure(
        kube, namespace, name, service, spec, options, render, pods
    )
    in_force = speculation_in_force(spec, service.status.speculative_config)
    tick = plan_tick(
        body,
        service.status,
        in_force,
        spec,
        fetched,
        pods_ready,
        now,
        options.default_context_tokens,
        canary,
    )
    owned = status_apply(Writer.CONTROLLER, tick.status)
    _DECIDED[namespace, name] = tick.decision.at
    if _unchanged(owned, body):  # a hold on the same state: an apply would be a no-op write
        patched = body
    else:
        patched = await to_thread_to_end(kube.apply_status, body, owned, Writer.CONTROLLER)
    _report(namespace, name, spec.speculation.mode, tick.decision)
    if tick.event is not None:
        post_event(patched, *tick.event)
    if tick.render:  # render (and record a new choice) now, not at the next resync
        await to_thread_to_end(
            reconcile,
            kube,
            patched,
            render,
            lambda type_, reason, message: post_event(patched, type_, reason, message),
            choice=tick.choice,
        )
    return _next_tick(
        _wait(parse_service(patched), options, options.clock()),
        options.source.sampling_interval(spec),
    )
