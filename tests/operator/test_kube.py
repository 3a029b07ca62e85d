"""The API client's failure modes that the reconciliation relies on."""

from __future__ import annotations

import socket
from collections.abc import Iterator

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
