"""vLLM's /metrics page from an EngineMetrics snapshot, produced with prometheus-client."""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from specops.sim._metrics import EngineMetrics
from specops.vllm import ENGINE_METRICS

__all__ = ["render_metrics"]

_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def _le(bound: float) -> str:
    """A bucket bound as prometheus-client's Histogram writes it: 1.0, 0.25, +Inf."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class _SnapshotCollector(Collector):
    def __init__(self, metrics: EngineMetrics, model_name: str, speculative: bool) -> None:
        self._metrics = metrics
        self._labels = [model_name, "0"]
        self._speculative = speculative

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        for name, spec in ENGINE_METRICS.items():
            if name.startswith("vllm:spec_decode_") and not self._speculative:
                continue
            labels = list(spec.labels)
            if spec.kind == "counter":
                counter = CounterMetricFamily(name, spec.documentation, labels=labels)
                if name == "vllm:request_success":
                    for reason, value in metrics.success.items():
                        counter.add_metric([*self._labels, reason], value)
                elif name == _PER_POSITION:
                    for position, value in enumerate(metrics.accepted_per_position):
                        counter.add_metric([*self._labels, str(position)], value)
                else:
                    counter.add_metric(self._labels, metrics.counters[name])
                yield counter
            elif spec.kind == "gauge":
                gauge = GaugeMetricFamily(name, spec.documentation, labels=labels)
                gauge.add_metric(self._labels, metrics.gauges[name])
                yield gauge
            else:
                snapshot = metrics.histograms[name]
                histogram = HistogramMetricFamily(name, spec.documentation, labels=labels)
                buckets = [
                    (_le(bound), float(cumulative))
                    for bound, cumulative in zip(
                        (*snapshot.bounds, float("inf")), snapshot.cumulative, strict=True
                    )
                ]
                histogram.add_metric(self._labels, buckets, snapshot.total)
                yield histogram


def render_metrics(metrics: EngineMetrics, model_name: str, *, speculative: bool) -> bytes:
    """The Prometheus text page; spec-decode families only when speculation is on, as vLLM."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(metrics, model_name, speculative))
    return generate_latest(registry)
