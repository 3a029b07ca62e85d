"""vLLM's /metrics page from an EngineMetrics snapshot, produced with prometheus-client.

Every family vLLM always registers is on the page, with the children vLLM creates when it
starts; counters and histograms carry the ``_created`` series prometheus-client adds (when
the caller says when the metrics were created). The page is always in the text format
(0.0.4), whatever the Accept header asks: prometheus-client 0.26's OpenMetrics writer escapes
the colons of vLLM's names (``vllm:num_preemptions`` becomes ``vllm_num_preemptions``), so a
Prometheus that asks for OpenMetrics (every current one does) would store every series under
a name no dashboard, alert or sidecar query reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from specops.vllm import RELEASE_METRICS
from specops_lab.sim._metrics import CACHE_CONFIG_INFO, EngineMetrics

__all__ = ["CONTENT_TYPE", "render_metrics"]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def _le(bound: float) -> str:
    """A bucket bound as prometheus-client's Histogram writes it: 1.0, 0.25, +Inf."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class _SnapshotCollector(Collector):
    def __init__(
        self, metrics: EngineMetrics, model_name: str, speculative: bool, created: float | None
    ) -> None:
        self._metrics = metrics
        self._base = {"model_name": model_name, "engine": "0"}
        self._speculative = speculative
        self._created = created

    def _children(self, name: str) -> list[tuple[list[str], float]]:
        """Each child's label values and value, for a counter or a gauge."""
        spec = RELEASE_METRICS[name]
        base = [self._base[label] for label in spec.labels if label in self._base]
        metrics = self._metrics
        if name == _PER_POSITION:
            per_position = enumerate(metrics.accepted_per_position)
            return [([*base, str(position)], value) for position, value in per_position]
        if name == CACHE_CONFIG_INFO:
            return [([*(metrics.cache_config[label] for label in spec.labels[:-1]), *base], 1.0)]
        if spec.label_values:
            return [([*base, label], value) for label, value in metrics.labelled[name].items()]
        values = metrics.counters if spec.kind == "counter" else metrics.gauges
        return [(base, values[name])]

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        created = self._created
        for name, spec in RELEASE_METRICS.items():
            if name.startswith("vllm:spec_decode_") and not self._speculative:
                continue
            labels = list(spec.labels)
            if spec.kind == "counter":
                counter = CounterMetricFamily(name, spec.documentation, labels=labels)
                for values, value in self._children(name):
                    counter.add_metric(values, value, created=created)
                yield counter
            elif spec.kind == "gauge":
                gauge = GaugeMetricFamily(name, spec.documentation, labels=labels)
                for values, value in self._children(name):
                    gauge.add_metric(values, value)
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
                values = [self._base[label] for label in labels]
                histogram.add_metric(values, buckets, snapshot.total)
                if created is not None:
                    child = dict(zip(labels, values, strict=True))
                    histogram.samples.append(Sample(f"{name}_created", child, created))
                yield histogram


def render_metrics(
    metrics: EngineMetrics,
    model_name: str,
    *,
    speculative: bool,
    created: float | None = None,
) -> bytes:
    """The page (text format); spec-decode families only when speculation is on, as vLLM;
    ``_created`` series only with ``created`` (Unix seconds)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(metrics, model_name, speculative, created))
    return generate_latest(registry)
