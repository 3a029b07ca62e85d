"""Shared pieces for the sidecar tests: a fake engine served through httpx's MockTransport."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.observation.fake_vllm import FakeVllm

Handler = Callable[[httpx.Request], httpx.Response]


def page_handler(engine: FakeVllm) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/metrics"
        return httpx.Response(200, text=engine.page())

    return handle


def matrix_from_page(engine: FakeVllm, timestamp: float) -> dict[str, object]:
    """What Prometheus answers for the page it scraped at ``timestamp`` (one target)."""
    from specops.observation import parse_exposition

    target = {"job": "vllm", "instance": "10.0.0.7:8000", "namespace": "ns", "pod": "p-0"}
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"__name__": s.name, **s.labels, **target},
                    "values": [[timestamp, repr(s.value)]],
                }
                for s in parse_exposition(engine.page(), timestamp).series
            ],
        },
    }
