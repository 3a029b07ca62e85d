"""The watch cache the reconciliations read their children and their service from."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes
from specops_operator._cache import WatchCache
from specops_operator._fetch import matching, pod_view
from specops_operator._kube import Kube, KubeApiError

LABELS = {"app.kubernetes.io/managed-by": "specops", "specops.io/service": "llama"}


def _deployment(
    version: str, replicas: int = 1, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "namespace": "ml",
            "name": "llama",
            "resourceVersion": version,
            "labels": LABELS if labels is None else labels,
        },
        "spec": {"replicas": replicas},
    }


def test_a_watch_event_older_than_what_is_held_is_dropped() -> None:
    cache = WatchCache()
    cache.keep(_deployment("12", replicas=2))  # the answer to the operator's own apply
    cache.keep(_deployment("11", replicas=1))  # the watch, catching up late
    held = cache.get(_deployment("0"))
    assert held is not None and held["spec"]["replicas"] == 2
    cache.keep(_deployment("13", replicas=3))
    assert (cache.get(_deployment("0")) or {})["spec"]["replicas"] == 3


def test_what_is_held_is_a_copy_on_the_way_in_and_out() -> None:
    cache, kept = WatchCache(), _deployment("5")
    cache.keep(kept)
    kept["spec"]["replicas"] = 9
    read = cache.get(kept)
    assert read is not None and read["spec"]["replicas"] == 1
    read["spec"]["replicas"] = 7
    assert (cache.get(kept) or {})["spec"]["replicas"] == 1


def test_objects_no_watch_would_update_are_never_held() -> None:
    """A foreign object under a child's name carries none of the operator's labels: no watch
    would tell of its deletion, so holding it would keep the operator from its own child."""
    cache = WatchCache()
    cache.keep(_deployment("5", labels={"app": "theirs"}))
    cache.keep(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": LABELS}}
    )
    assert len(cache) == 0
    service = {
        "apiVersion": "specops.io/v1alpha1",
        "kind": "SpeculativeService",
        "metadata": {"namespace": "ml", "name": "llama", "resourceVersion": "3"},
    }
    cache.keep(service)
    assert cache.get(service) == service


def test_a_deleted_object_is_a_miss() -> None:
    cache = WatchCache()
    cache.keep(_deployment("5"))
    cache.drop(_deployment("6"))
    assert cache.get(_deployment("0")) is None


class _Counting(Kube):
    """A client whose API server holds one Deployment, counting what it is asked."""

    def __init__(self, cache: WatchCache | None) -> None:
        super().__init__(kubernetes.client.ApiClient(), cache=cache)
        self.live = _deployment("20")
        self.asked: list[str] = []

    def _call(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        self.asked.append(method)
        if method == "GET":
            return copy.deepcopy(self.live)
        if method == "PATCH":
            self.live = {
                **copy.deepcopy(body),
                "metadata": {**self.live["metadata"], "resourceVersion": "21"},
            }
            return copy.deepcopy(self.live)
        if method == "DELETE":
            raise KubeApiError("DELETE: 404 NotFound", 404)
        raise AssertionError(method)


def test_a_read_is_served_from_the_cache_once_held_and_a_fresh_read_asks_again() -> None:
    kube = _Counting(WatchCache())
    assert kube.get(_deployment("0")) == kube.live
    assert kube.get(_deployment("0")) == kube.live
    assert kube.asked == ["GET"]
    assert kube.get(_deployment("0"), fresh=True) is not None
    assert kube.asked == ["GET", "GET"]


def test_what_the_operator_wrote_is_read_back_at_once() -> None:
    kube = _Counting(WatchCache())
    applied = kube.apply(_deployment("0", replicas=4))
    assert (
        (kube.get(_deployment("0")) or {})["spec"]["replicas"] == 4 == applied["spec"]["replicas"]
    )
    assert kube.asked == ["PATCH"]
    assert not kube.delete(_deployment("0"))  # gone already: the cache forgets it too
    assert kube.get(_deployment("0")) is not None and kube.asked == ["PATCH", "DELETE", "GET"]


def test_without_a_cache_every_read_asks_the_api_server() -> None:
    kube = _Counting(None)
    kube.get(_deployment("0"))
    kube.get(_deployment("0"))
    assert kube.asked == ["GET", "GET"]


def test_the_pods_view_keeps_what_the_control_loop_reads_and_selects_by_labels() -> None:
    pod = {
        "metadata": {
            "name": "llama-1",
            "labels": {**LABELS, "x": "1"},
            "managedFields": [{}],
            "annotations": {"big": "a" * 1000},
        },
        "spec": {"containers": [{"name": "vllm"}]},
        "status": {
            "podIP": "127.0.0.5",
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}],
        },
    }
    view = pod_view(pod)
    assert view == {
        "metadata": {"name": "llama-1", "labels": {**LABELS, "x": "1"}, "deletionTimestamp": None},
        "status": {"podIP": "127.0.0.5", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert matching([view], {"x": "1"}) == [view]
    assert matching([view], {"x": "2"}) == []
    assert matching([view], {}) == [view]
    other = {**view, "metadata": {**view["metadata"], "name": "llama-0"}}
    assert [p["metadata"]["name"] for p in matching([view, other], {})] == ["llama-0", "llama-1"]


def test_a_child_looked_for_only_in_the_cache_costs_no_request_when_absent() -> None:
    """A canary's Deployment to retire: absent on almost every resync of a fleet."""
    kube = _Counting(WatchCache())
    assert kube.held(_deployment("0")) is None and kube.asked == []
    kube.apply(_deployment("0"))
    assert kube.held(_deployment("0")) is not None and kube.asked == ["PATCH"]
    assert _Counting(None).held(_deployment("0")) is not None  # no cache: the API server
