"""The API client's failure modes that the reconciliation relies on."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from specops_operator import _kube
from specops_operator._kube import Kube, KubeApiError

SERVICE = {
    "apiVersion": "specops.io/v1alpha1",
    "kind": "SpeculativeService",
    "metadata": {"namespace": "ml", "name": "llama"},
}


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An API server address that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        host, port = listener.getsockname()
        yield f"http://{host}:{port}"


def test_a_server_that_never_answers_fails_the_call(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call ends with an error naming the request, so the service's turn is given back."""
    monkeypatch.setattr(_kube, "REQUEST_TIMEOUT", (0.2, 0.2))
    configuration = kubernetes.client.Configuration(host=silent_server)
    configuration.retries = 0
    kube = Kube(kubernetes.client.ApiClient(configuration))
    with pytest.raises(KubeApiError, match=r"GET /apis/specops\.io/v1alpha1/namespaces/ml/"):
        kube.get(SERVICE)


class _Discovering(Kube):
    """A client whose API server serves no API group, counting what it is asked."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__(
            kubernetes.client.ApiClient(), discovery_refresh_s=600.0, clock=lambda: clock[0]
        )
        self.asked: list[str] = []

    def _call(self, method: str, path: str, *_: Any, **__: Any) -> dict[str, Any]:
        self.asked.append(f"{method} {path}")
        raise KubeApiError(f"{method} {path}: 404 NotFound", 404)


def test_api_discovery_is_asked_once_per_refresh_interval() -> None:
    """Every reconciliation asks whether PodMonitors are served: only the first in each
    interval costs a request (a 404 on a cluster without the Prometheus Operator)."""
    clock = [1000.0]
    kube = _Discovering(clock)
    assert not any(kube.has_api_group("monitoring.coreos.com") for _ in range(5))
    assert kube.asked == ["GET /apis/monitoring.coreos.com"]
    clock[0] += 599.0
    assert not kube.has_api_group("monitoring.coreos.com")
    assert len(kube.asked) == 1
    clock[0] += 2.0
    assert not kube.has_api_group("monitoring.coreos.com")
    assert len(kube.asked) == 2
