"""The specops sidecar: reads one vLLM pod's metrics and serves windowed estimates."""

from specops_sidecar._exposition import metric_families
from specops_sidecar._http import aiohttp_get
from specops_sidecar._server import build_app, poll_forever

__all__ = [
    "aiohttp_get",
    "build_app",
    "metric_families",
    "poll_forever",
]
