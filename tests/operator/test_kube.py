"""The API client's failure modes that the reconciliation relies on."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import kubernetes
import pytest
import yaml
from specops_operator import _handlers, _kube
from specops_operator._kube import Kube, KubeApiError, TokenBucket

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


def test_the_token_bucket_lets_a_burst_through_then_paces_at_qps() -> None:
    now, slept = [0.0], []

    def sleep(seconds: float) -> None:
        slept.append(seconds)

    bucket = TokenBucket(qps=10.0, burst=3, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):
        bucket.take()
    assert slept == []
    bucket.take()
    bucket.take()  # queued behind the one before: its slot comes a tenth of a second later
    assert slept == pytest.approx([0.1, 0.2])
    now[0] += 10.0  # a quiet spell refills the burst, no more
    for _ in range(3):
        bucket.take()
    assert len(slept) == 2
    bucket.take()
    assert slept[-1] == pytest.approx(0.1)


def test_an_urgent_request_does_not_wait_behind_the_queue_but_the_queue_waits_for_it() -> None:
    now, slept = [0.0], list[float]()
    bucket = TokenBucket(qps=10.0, burst=1, clock=lambda: now[0], sleep=slept.append)
    bucket.take()
    bucket.take()  # a resync, queued: 0.1 s
    bucket.take(urgent=True)  # a user's edit: at once
    bucket.take()  # the next resync waits for the edit's token too
    assert slept == pytest.approx([0.1, 0.3])


def test_without_qps_nothing_waits() -> None:
    bucket = TokenBucket(qps=0.0, burst=1, sleep=lambda _: pytest.fail("waited"))
    for _ in range(100):
        bucket.take()


def test_the_connection_pool_holds_a_connection_per_calling_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every worker thread of kopf's executor can hold a connection at once: a full pool
    drops the extra ones ("Connection pool is full") and opens a new one per request."""
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    settings = kopf.OperatorSettings()
    settings.execution.max_workers = 40
    memo = kopf.Memo(control=object())
    log = logging.getLogger("test")
    _handlers._configure(settings=settings, memo=memo, logger=log)  # type: ignore[call-arg]
    pool = memo.kube._api.rest_client.pool_manager.connection_pool_kw["maxsize"]
    assert pool >= 40
