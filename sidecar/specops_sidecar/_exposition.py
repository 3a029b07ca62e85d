"""The sidecar's own ``/metrics``: a PodObservation as Prometheus gauges.

Every series carries ``namespace``, ``pod`` and ``service``. An estimate is exported
only while its status is ``ok``: a stale or unknown estimate has no series (a gap in a
graph, never a made-up number), and ``specops_estimate_ok`` and
``specops_metrics_age_seconds`` say why. Names carry their unit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from specops.observation import (
    DistributionObservation,
    EstimateStatus,
    LatencyObservation,
    PodObservation,
    SourceCounts,
    WindowObservation,
)

__all__ = ["metric_families"]

_BASE = ("namespace", "pod", "service")
_QUANTILES = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"))


def _identity(observation: PodObservation) -> list[str]:
    """The base labels' values; no pod (a whole service's) is the empty value, which
    Prometheus reads as no label."""
    return [observation.namespace, observation.pod or "", observation.service]


class _Families:
    """Gauge families keyed by name, each with the base labels plus its own."""

    def __init__(self, base: Sequence[str]) -> None:
        self._base = list(base)
        self._families: dict[str, GaugeMetricFamily] = {}

    def set(self, name: str, doc: str, value: float | None, **labels: str) -> None:
        if value is None:
            return
        family = self._families.get(name)
        if family is None:
            family = GaugeMetricFamily(name, doc, labels=[*_BASE, *labels])
            self._families[name] = family
        family.add_metric([*self._base, *labels.values()], value)

    def all(self) -> Iterator[Metric]:
        yield from self._families.values()


def _distribution(
    out: _Families, name: str, doc: str, found: DistributionObservation | None, window: str
) -> None:
    if found is None:
        return
    out.set(name, f"{doc} (mean over the window's readings)", found.mean, window=window)
    for label, attribute in (*_QUANTILES, ("1", "max")):
        out.set(
            f"{name}_quantile",
            f"{doc} (quantiles over the window's readings)",
            getattr(found, attribute),
            window=window,
            quantile=label,
        )


def _latency(
    out: _Families, name: str, doc: str, found: LatencyObservation | None, window: str
) -> None:
    if found is None:
        return
    for label, attribute in _QUANTILES:
        out.set(name, doc, getattr(found, f"{attribute}_seconds"), window=window, quantile=label)
    out.set(f"{name}_mean", f"{doc} (mean)", found.mean_seconds, window=window)


def _window(out: _Families, w: WindowObservation) -> None:
    window = f"{w.window_seconds:g}s"
    for estimate, status in (
        ("acceptance", w.acceptance.status),
        ("load", w.load.status),
        ("cost", w.cost.status),
        ("outcome", w.outcome.status),
    ):
        out.set(
            "specops_estimate_ok",
            "1 when the estimate is fresh, 0 when it is stale or unknown",
            float(status is EstimateStatus.OK),
            window=window,
            estimate=estimate,
        )
    a = w.acceptance
    if a.status is EstimateStatus.OK:
        out.set(
            "specops_acceptance_length",
            "1 + accepted / drafts",
            a.mean_acceptance_length,
            window=window,
        )
        out.set(
            "specops_acceptance_rate_ratio",
            "accepted / draft tokens",
            a.acceptance_rate,
            window=window,
        )
        out.set("specops_drafts", "Drafts in the window", a.drafts, window=window)
        for i, rate in enumerate(a.per_position):
            out.set(
                "specops_acceptance_per_position_ratio",
                "a_i: drafts with token i accepted",
                rate,
                window=window,
                position=str(i),
            )
        for e in a.expected_tokens:
            labels = {"window": window, "k": str(e.k), "measured": str(e.measured).lower()}
            out.set(
                "specops_expected_tokens_per_step", "E(k), bonus token included", e.tokens, **labels
            )
            out.set(
                "specops_expected_tokens_per_step_stderr",
                "Standard error of E(k)",
                e.stderr,
                **labels,
            )
    load = w.load
    if load.status is EstimateStatus.OK:
        _distribution(
            out, "specops_running_requests", "Running requests per engine", load.running, window
        )
        _distribution(
            out, "specops_waiting_requests", "Waiting requests per engine", load.waiting, window
        )
        _distribution(
            out, "specops_kv_cache_usage_ratio", "KV-cache usage", load.kv_cache_usage, window
        )
        out.set(
            "specops_preemptions_per_second",
            "Preemptions per second",
            load.preemptions_per_second,
            window=window,
        )
    cost = w.cost
    if cost.status is EstimateStatus.OK:
        out.set(
            "specops_steps_per_second",
            "Engine steps per second, per engine",
            cost.steps_per_second,
            window=window,
        )
        out.set(
            "specops_batched_tokens_per_step",
            "Verified tokens per step",
            cost.batched_tokens_per_step,
            window=window,
        )
        out.set(
            "specops_step_duration_seconds",
            "Mean step time while busy",
            cost.step_seconds,
            window=window,
        )
    if cost.status is EstimateStatus.OK and cost.fit is not None:
        out.set(
            "specops_step_time_intercept_seconds",
            "Fitted a of T = a + b N",
            cost.fit.intercept_seconds,
            window=window,
        )
        out.set(
            "specops_step_time_slope_seconds_per_token",
            "Fitted b of T = a + b N",
            cost.fit.slope_seconds_per_token,
            window=window,
        )
    outcome = w.outcome
    if outcome.status is EstimateStatus.OK:
        _latency(out, "specops_tpot_seconds", "Time per output token", outcome.tpot, window)
        _latency(out, "specops_itl_seconds", "Inter-token latency", outcome.itl, window)
        out.set(
            "specops_output_tokens_per_second",
            "Generated tokens per second",
            outcome.output_tokens_per_second,
            window=window,
        )


def metric_families(
    observation: PodObservation, now: float, counts: SourceCounts
) -> Iterable[Metric]:
    """The gauges for one observation (pure: the same inputs give the same families)."""
    out = _Families(_identity(observation))
    out.set(
        "specops_source_up",
        "1 when the last read of the metrics source succeeded",
        float(observation.source.up),
        source=observation.source.kind,
    )
    if observation.latest_reading_at is not None:
        out.set(
            "specops_metrics_age_seconds",
            "Seconds since the newest reading",
            now - observation.latest_reading_at,
        )
    out.set(
        "specops_source_read_duration_seconds",
        "How long the last read took",
        counts.last_read_seconds,
    )
    out.set("specops_configured_k", "Draft positions the engine reports", observation.configured_k)
    for window in observation.windows:
        _window(out, window)
    prediction = observation.prediction
    if prediction.status is EstimateStatus.OK:
        for c in prediction.candidates:
            out.set(
                "specops_predicted_speedup",
                "Predicted throughput ratio over k = 0",
                c.predicted_speedup,
                k=str(c.k),
            )
            out.set(
                "specops_predicted_tpot_seconds",
                "Predicted mean TPOT at the observed load",
                c.predicted_tpot_seconds,
                k=str(c.k),
            )
            if c.crossover_batch is not None:
                out.set(
                    "specops_crossover_concurrency",
                    "Smallest batch where k stops paying",
                    float(c.crossover_batch),
                    k=str(c.k),
                )
        out.set(
            "specops_recommended_k",
            "Recommended num_speculative_tokens (0: off)",
            prediction.recommended_k,
        )
    yield from out.all()
    reads = CounterMetricFamily(
        "specops_source_reads", "Reads of the metrics source", labels=[*_BASE, "result"]
    )
    base = _identity(observation)
    reads.add_metric([*base, "ok"], counts.reads_ok)
    reads.add_metric([*base, "error"], counts.reads_failed)
    yield reads
