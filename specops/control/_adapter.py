"""From the pods' wire observations to one control input for the whole service.

Each pod's sidecar measures its own engine; the slow loop decides for the service. Counters
add up across pods (drafts, accepted tokens per position), distributions mix by their
sample counts, and a pod is left out, with the reason said, when it has nothing fresh
to offer or runs another config than the one in force (mid-rollout), so one odd pod
can neither fake a regime nor mix the acceptance of two different k.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specops.control._decide import ControlInput
from specops.observation import (
    AcceptanceObservation,
    CostPointObservation,
    DistributionObservation,
    EstimateStatus,
    PodObservation,
    WindowObservation,
    measured_prompts,
)
from specops.policy import BatchDistribution, SpecConfig, StepPoint, TpotHistogram

__all__ = ["ServiceWindow", "batch_distribution", "service_window"]


@dataclass(frozen=True)
class ServiceWindow:
    """The service's measurements over one window and whether they can be used.

    ``control_input`` is what the decision reads (its ``problem`` is set when nothing
    usable was measured); ``reason``/``message`` feed the MetricsAvailable condition; the
    rest are the figures reported in status (per engine, averaged over the measured pods);
    ``context_source`` says whether the context per request was measured, and how.
    """

    control_input: ControlInput
    available: bool
    reason: str
    message: str
    pods_measured: int
    window_s: float
    concurrency: float | None = None
    acceptance_length: float | None = None
    acceptance_per_position: tuple[float, ...] = ()
    tpot_s: float | None = None
    throughput_per_pod: float | None = None
    drafted_tokens_per_draft: float | None = None
    context_source: str = ""


def batch_distribution(running: DistributionObservation) -> BatchDistribution | None:
    """The busy part of a bucketed running-request histogram as a batch-size distribution.

    Each bucket's share is spread evenly over the whole batch sizes in it, and nothing is
    put above the largest value seen; idle samples (batch 0) are left out. None when
    the engine never had a request running.
    """
    weights: dict[int, float] = {}
    top = math.ceil(running.max)
    lower, below = 0, 0.0
    for bound, cumulative in zip(running.bounds, running.cumulative_fractions, strict=True):
        share = cumulative - below
        upper = min(math.floor(bound), top)
        if share > 0 and upper > lower:
            batches = range(lower + 1, upper + 1)
            for batch in batches:
                weights[batch] = weights.get(batch, 0.0) + share / len(batches)
        lower, below = max(lower, math.floor(bound)), cumulative
    if below < 1.0 and top > lower:  # the open top bucket
        weights[top] = weights.get(top, 0.0) + 1.0 - below
    busy = round(running.samples * (1.0 - running.cumulative_fractions[0]))
    if not weights or busy <= 0:
        return None
    return BatchDistribution.from_weights(weights, samples=busy)


def _window(pod: PodObservation, length: float) -> WindowObservation | None:
    if not pod.windows:
        return None
    return min(pod.windows, key=lambda w: abs(w.window_seconds - length))


def _weighted(pairs: Sequence[tuple[float | None, float]]) -> float | None:
    known = [(v, w) for v, w in pairs if v is not None and w > 0]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if total > 0 else None


def _context_tokens(
    windows: Sequence[WindowObservation], kv_capacity_tokens: int | None, default: float
) -> tuple[float, str]:
    """Mean context per running request: KV tokens in use over requests running.

    The usage is a share of the pool the engine sized, which it reports (its
    gpu_memory_utilization, max_model_len and GPU decide it, not the model); only an engine
    that does not is read with ``kv_capacity_tokens``, the profile's pool. Also where the
    figure comes from, in words."""
    estimates: list[tuple[float | None, float]] = []
    engines = 0
    for w in windows:
        running, kv = w.load.running, w.load.kv_cache_usage
        pool = w.load.kv_capacity_tokens or kv_capacity_tokens
        if pool and running is not None and kv is not None and running.mean > 0:
            estimates.append((kv.mean * pool / running.mean, running.mean))
            engines += 1 if w.load.kv_capacity_tokens else 0
    found = _weighted(estimates)
    if found is None:
        return default, "assumed: no pod measured the KV cache in use against a known pool"
    if engines == len(estimates):
        return found, "measured: KV cache in use over running requests, of the engines' pools"
    return found, (
        f"measured: KV cache in use over running requests, of the profile's pool for "
        f"{len(estimates) - engines} of {len(estimates)} pods (their engines report none)"
    )


def _tpot_histogram(windows: Sequence[WindowObservation]) -> TpotHistogram | None:
    """The pods' request TPOT histograms as one; None when none sent its buckets (or
    their buckets differ, which one engine release does not do)."""
    merged: TpotHistogram | None = None
    for w in windows:
        tpot = w.outcome.tpot
        if tpot is None or not tpot.bounds or tpot.observations <= 0:
            continue
        found = TpotHistogram.from_fractions(
            tpot.bounds, tpot.cumulative_fractions, tpot.observations, tpot.mean_seconds
        )
        if merged is not None and merged.bounds != found.bounds:
            return None
        merged = found if merged is None else merged.plus(found)
    return merged


def _decoding(point: CostPointObservation) -> float:
    """The requests decoding per step; the running ones where the counters gave none."""
    return point.decoding if point.decoding > 0 else point.batch


def _accepted_counts(acceptance: AcceptanceObservation) -> Sequence[float]:
    """The window's accepted tokens per position, as the engine counted them: a sidecar
    older than the raw counts sent only the shares over all drafts, which are the same."""
    if acceptance.accepted_per_position:
        return acceptance.accepted_per_position
    return [rate * acceptance.drafts for rate in acceptance.per_position]


def _drafting_share(point: CostPointObservation) -> float:
    """The share of steps that drafted.

    Each request that decodes on a drafting step proposes its k tokens once, so drafts over
    the requests decoding per step is that share. The running requests are no stand-in
    for the decoding ones: they include requests still prefilling, which do not draft,
    and while load ramps up that would make steps that all drafted look like a mix of
    drafting and plain steps, and teach the posterior that drafting costs nothing fixed.
    """
    decoding = _decoding(point)
    if decoding <= 0:
        return 0.0
    return min(point.drafts / decoding, 1.0)


def _step_points(
    used: Sequence[tuple[PodObservation, WindowObservation]],
    context_tokens: float,
    table: bool,
) -> list[StepPoint]:
    """The pods' measured intervals as step-time points, oldest first; the proposed tokens
    per draft is the mean draft length.

    An interval with drafts on a pod running without speculation (a series summed across
    a restart) would teach the step-time model a k the steps did not run, so it is left
    out; no drafts on a drafting pod is what a k = 0 row of a table does, and counts.
    """
    points: list[StepPoint] = []
    for pod, window in used:
        speculating_pod = bool(pod.configured_k)
        for p in window.cost.points:
            if p.batch <= 0 or (p.drafts > 0 and not speculating_pod):
                continue
            speculating = _drafting_share(p)
            points.append(
                StepPoint(
                    batched_tokens=p.batched_tokens,
                    context_tokens=p.batch * context_tokens,
                    positions=p.drafted_tokens / p.drafts * speculating if p.drafts > 0 else 0.0,
                    drafted=p.drafted_tokens,
                    speculating=speculating,
                    step_seconds=p.step_seconds,
                    steps=p.steps,
                    end=p.end,
                    decoding=_decoding(p),
                    table=table,
                    spread=tuple(p.spread),
                )
            )
    return sorted(points, key=lambda p: p.end)


def _drafted_per_draft(windows: Sequence[WindowObservation]) -> float | None:
    """The k the engines ran, as vLLM counts it: draft tokens over drafts."""
    points = [p for w in windows for p in w.cost.points]
    drafts = sum(p.drafts * p.steps for p in points)
    drafted = sum(p.drafted_tokens * p.steps for p in points)
    return drafted / drafts if drafts > 0 else None


def _unavailable(
    reason: str, problem: str, now: float, window_s: float, pods_ready: bool
) -> ServiceWindow:
    control_input = ControlInput(
        window_end=now,
        load=None,
        context_tokens=0.0,
        num_drafts=0.0,
        accepted_per_position=(),
        window_s=window_s,
        pods_ready=pods_ready,
        problem=problem,
    )
    return ServiceWindow(control_input, False, reason, problem, 0, window_s)


def _left_out(pod: PodObservation, window: WindowObservation | None, k: int) -> str | None:
    """Why a pod's window is not used, or None when it is."""
    if pod.status is EstimateStatus.INVALID:
        return f"{pod.subject}: impossible readings ({'; '.join(pod.problems)})"
    if pod.status is not EstimateStatus.OK or window is None:
        return f"{pod.subject}: estimates {pod.status.value}"
    if pod.configured_k != k:
        return f"{pod.subject}: runs k={pod.configured_k}, not the k={k} in force"
    return None


def service_window(
    pods: Sequence[PodObservation],
    failures: Sequence[str],
    *,
    window_s: float,
    in_force: SpecConfig,
    now: float,
    pods_ready: bool,
    kv_capacity_tokens: int | None = None,
    default_context_tokens: float = 1024.0,
) -> ServiceWindow:
    """Aggregate the pods' observations of the window closest to ``window_s``.

    ``failures`` are the pods (or the source) that gave no observation, as messages;
    ``in_force`` is the speculation the pods were given: pods reporting another k are
    left out, and its table (if any) is what their steps ran under.
    """
    configured_k = in_force.num_speculative_tokens
    skipped = list(failures)
    used: list[tuple[PodObservation, WindowObservation]] = []
    for pod in pods:
        window = _window(pod, window_s)
        if (why := _left_out(pod, window, configured_k)) is not None:
            skipped.append(why)
        elif window is not None:
            used.append((pod, window))
    note = f"; left out: {'; '.join(skipped)}" if skipped else ""
    stale = sum(p.status is EstimateStatus.STALE for p in pods)
    if not used:
        if any(p.status is EstimateStatus.INVALID for p in pods):
            return _unavailable(
                "MetricsImpossible",
                f"no believable measurements{note}",
                now,
                window_s,
                pods_ready,
            )
        if stale:
            return _unavailable(
                "MetricsStale",
                f"no fresh measurements from any pod{note}",
                now,
                window_s,
                pods_ready,
            )
        reason = "NoObservations" if not pods else "NoData"
        detail = "; ".join(skipped) if skipped else "no pod to measure"
        return _unavailable(reason, f"no usable measurements: {detail}", now, window_s, pods_ready)

    windows = [w for _, w in used]
    loads = [
        (d, w.load.running.samples)
        for w in windows
        if w.load.running is not None and (d := batch_distribution(w.load.running)) is not None
    ]
    load: BatchDistribution | None = None
    if loads:
        merged: dict[int, float] = {}
        for distribution, samples in loads:
            for batch, weight in distribution.weights:
                merged[batch] = merged.get(batch, 0.0) + weight * samples
        load = BatchDistribution.from_weights(merged, samples=sum(d.samples for d, _ in loads))

    measured = [
        w.acceptance
        for w in windows
        if w.acceptance.status is EstimateStatus.OK and w.acceptance.drafts > 0
    ]
    counts = [_accepted_counts(a) for a in measured]
    positions = min((len(c) for c in counts), default=0)
    drafts = sum(a.drafts for a in measured) if positions else 0.0
    accepted = tuple(sum(c[i] for c in counts) for i in range(positions))
    context, context_source = _context_tokens(windows, kv_capacity_tokens, default_context_tokens)
    tpots = [
        (w.outcome.tpot.mean_seconds, w.outcome.tpot.observations)
        for w in windows
        if w.outcome.tpot is not None
    ]
    tpot = _weighted(tpots)
    control_input = ControlInput(
        tpot_histogram=_tpot_histogram(windows),
        window_end=min(p.latest_reading_at or p.observed_at for p, _ in used),
        load=load,
        context_tokens=context,
        num_drafts=drafts,
        accepted_per_position=accepted,
        window_s=window_s,
        pods_ready=pods_ready,
        cost_points=tuple(_step_points(used, context, bool(in_force.per_batch_size))),
        prompts=measured_prompts([w.outcome for w in windows]),
        tpot_s=tpot,
    )
    running = [
        (w.load.running.mean, float(w.load.running.samples)) for w in windows if w.load.running
    ]
    rates = [w.outcome.output_tokens_per_second for w in windows]
    known_rates = [r for r in rates if r is not None]
    return ServiceWindow(
        control_input=control_input,
        available=True,
        reason="Measured",
        message=f"{len(used)} of {len(used) + len(skipped)} pods measured over "
        f"{windows[0].window_seconds:g}s{note}",
        pods_measured=len(used),
        window_s=windows[0].window_seconds,
        concurrency=_weighted(running),
        acceptance_length=1.0 + sum(accepted) / drafts if drafts > 0 else None,
        acceptance_per_position=tuple(a / drafts for a in accepted) if drafts > 0 else (),
        tpot_s=tpot,
        throughput_per_pod=sum(known_rates) / len(known_rates) if known_rates else None,
        drafted_tokens_per_draft=_drafted_per_draft(windows),
        context_source=context_source,
    )
