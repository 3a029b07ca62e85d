"""The specops sidecar: reads one vLLM pod's metrics and serves windowed estimates."""

from specops_sidecar._exposition import SourceCounts, metric_families
from specops_sidecar._server import build_app, poll_forever
from specops_sidecar._sidecar import OncePerCause, Sidecar
from specops_sidecar._sources import DirectSource, HttpClient, MetricsSource, PrometheusSource

__all__ = [
    "DirectSource",
    "HttpClient",
    "MetricsSource",
    "OncePerCause",
    "PrometheusSource",
    "Sidecar",
    "SourceCounts",
    "build_app",
    "metric_families",
    "poll_forever",
]
