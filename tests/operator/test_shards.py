"""Shards and their Leases: the plan (pure), and replicas sharing one Lease store through the
operator's own client, on one simulated clock."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections import Counter
from typing import Any

import kubernetes
import pytest
from specops_operator._kube import Kube, KubeApiError
from specops_operator._leases import ShardKeeper
from specops_operator._shards import (
    Lease,
    LeaseRole,
    ShardSettings,
    Sightings,
    lease_name,
    member_name,
    plan_leases,
    shard_of,
)

LEASES = "/apis/coordination.k8s.io/v1/namespaces/specops/leases"


def _settings(identity: str, shards: int = 6, lease_s: float = 15.0) -> ShardSettings:
    return ShardSettings(shards=shards, identity=identity, namespace="specops", lease_s=lease_s)


def test_a_service_keeps_its_shard_and_a_fleet_spreads_over_all_of_them() -> None:
    uids = [f"6f1c2a9e-0000-4000-8000-{i:012d}" for i in range(600)]
    assert [shard_of(u, 6) for u in uids] == [shard_of(u, 6) for u in uids]
    counts = Counter(shard_of(u, 6) for u in uids)
    assert set(counts) == set(range(6))
    assert max(counts.values()) < 2 * min(counts.values())


def test_settings_refuse_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="shards"):
        _settings("a", shards=0)
    with pytest.raises(ValueError, match="Lease period"):
        _settings("a", lease_s=1.0)
    settings = _settings("a")
    assert settings.renew_s < settings.act_s < settings.take_after_s < settings.lease_s


def test_member_names_are_dns_labels_and_tell_identities_apart() -> None:
    a, b = member_name("specops", "Host_A-1234"), member_name("specops", "host-a-1234")
    assert a != b
    assert all(c.islower() or c.isdigit() or c == "-" for c in a)


def _shard(index: int, holder: str | None, version: str = "1") -> Lease:
    return Lease(lease_name("specops", index), LeaseRole.SHARD, holder, version, index)


def _member(holder: str, version: str = "1") -> Lease:
    return Lease(member_name("specops", holder), LeaseRole.MEMBER, holder, version)


def test_alone_a_replica_creates_every_shard_and_its_member_lease() -> None:
    plan = plan_leases([], Sightings(), _settings("a"), 0.0, {})
    assert sorted(plan.create) == list(range(6))
    assert plan.create_member and plan.share == 6 and plan.live == 1


def test_a_replica_takes_only_its_fair_share_and_releases_the_rest() -> None:
    leases = [_shard(i, "a") for i in range(6)] + [_member("a"), _member("b"), _member("c")]
    sightings = Sightings()
    sightings.see(leases, 0.0)
    plan = plan_leases(leases, sightings, _settings("a"), 1.0, {})
    assert plan.live == 3 and plan.share == 2
    assert len(plan.held) == 2 and len(plan.release) == 4
    assert {lease.index for lease in plan.release} | set(plan.held) == set(range(6))


def test_a_shard_is_taken_only_once_it_stood_unchanged_for_a_period_in_this_replicas_sight() -> (
    None
):
    leases = [_shard(0, "dead"), _member("dead")]
    sightings = Sightings()
    sightings.see(leases, 100.0)  # first seen now: its renewTime is not trusted
    settings = _settings("a", shards=1)
    assert settings.act_s < settings.take_after_s < settings.lease_s
    assert not plan_leases(leases, sightings, settings, 112.9, {}).take
    sightings.see(leases, 112.9)
    plan = plan_leases(leases, sightings, settings, 113.0, {})
    assert [lease.index for lease in plan.take] == [0]
    assert [m.holder for m in plan.forget] == ["dead"]  # and the dead member is forgotten
    renewed = [_shard(0, "dead", version="2"), _member("dead")]
    sightings.see(renewed, 116.0)  # it renewed after all: the period starts again
    assert not plan_leases(renewed, sightings, settings, 117.0, {}).take


def test_renewals_are_sent_only_when_due() -> None:
    leases = [_shard(0, "a"), _member("a")]
    sightings = Sightings()
    sightings.see(leases, 0.0)
    settings = _settings("a", shards=1)
    fresh = {lease.name: 9.0 for lease in leases}
    plan = plan_leases(leases, sightings, settings, 10.0, fresh)
    assert plan.held == (0,) and not plan.renew and plan.renew_member is None
    plan = plan_leases(leases, sightings, settings, 14.0, fresh)
    assert [lease.index for lease in plan.renew] == [0] and plan.renew_member is not None


class _LeaseServer(Kube):
    """The API server's Lease store in memory, behind the operator's own client: list by
    labels, create (409 when it exists), replace and delete with resourceVersion checks."""

    def __init__(self) -> None:
        super().__init__(kubernetes.client.ApiClient())
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.down = False
        self.lock = threading.Lock()
        self.queued: list[str] = []  # requests that would have waited in the rate limit's queue

    def _call(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        if not getattr(self._urgent, "on", False):
            self.queued.append(f"{method} {path}")
        if self.down:
            raise KubeApiError(f"{method} {path}: connection refused")
        with self.lock:
            return self._answer(method, path, body)

    def _answer(self, method: str, path: str, body: Any) -> dict[str, Any]:
        collection, _, query = path.partition("?")
        if method == "GET":
            assert collection == LEASES
            selector = urllib.parse.parse_qs(query)["labelSelector"][0].split(",")
            wanted = dict(s.split("=") for s in selector)
            items = [
                o
                for o in self.objects.values()
                if wanted.items() <= o["metadata"]["labels"].items()
            ]
            return {"items": json.loads(json.dumps(items))}
        if method == "POST":
            name = body["metadata"]["name"]
            if name in self.objects:
                raise KubeApiError("409 AlreadyExists", 409)
            return self._store(name, body)
        name = path.rsplit("/", 1)[1]
        held = self.objects.get(name)
        if held is None:
            raise KubeApiError("404 NotFound", 404)
        wanted_version = (
            body["metadata"]["resourceVersion"]
            if method == "PUT"
            else body.get("preconditions", {}).get("resourceVersion")
        )
        if wanted_version not in (None, held["metadata"]["resourceVersion"]):
            raise KubeApiError("409 Conflict", 409)
        if method == "DELETE":
            del self.objects[name]
            return {}
        return self._store(name, body)

    def _store(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored: dict[str, Any] = json.loads(json.dumps(body))
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[name] = stored
        return stored


def _replicas(
    server: _LeaseServer, clock: list[float], names: str, shards: int = 6
) -> dict[str, ShardKeeper]:
    return {
        name: ShardKeeper(server, _settings(name, shards=shards), clock=lambda: clock[0])
        for name in names
    }


def _step(keepers: dict[str, ShardKeeper], clock: list[float], seconds: float = 1.0) -> None:
    """One second of every live replica's rounds; never two replicas acting on one shard."""
    clock[0] += seconds
    for keeper in keepers.values():
        keeper.round()
        acting = Counter(s for k in keepers.values() for s in k.held())
        assert max(acting.values(), default=0) <= 1, acting


def test_three_replicas_share_the_shards_and_a_dead_ones_share_moves_within_a_period() -> None:
    server, clock = _LeaseServer(), [0.0]
    keepers = _replicas(server, clock, "abc")
    for _ in range(40):  # each has seen the others alive for a period, and the shares settled
        _step(keepers, clock)
    shares = {name: k.held() for name, k in keepers.items()}
    assert sorted(len(held) for held in shares.values()) == [2, 2, 2], shares
    assert frozenset().union(*shares.values()) == frozenset(range(6))

    dead = keepers.pop("b")  # killed: it never renews again
    died_at = clock[0]
    while not all(any(shard in k.held() for k in keepers.values()) for shard in shares["b"]):
        _step(keepers, clock)
        assert clock[0] - died_at <= dead.settings.lease_s + 2 * dead.settings.poll_s
    assert sorted(len(k.held()) for k in keepers.values()) == [3, 3]
    assert not dead.held()  # its last renewal is too old for it to act, had it lived on
    for _ in range(20):  # the dead member's Lease is forgotten
        _step(keepers, clock)
    assert member_name("specops", "b") not in server.objects


def test_a_replica_that_stops_cleanly_hands_its_shards_over_at_once() -> None:
    server, clock = _LeaseServer(), [0.0]
    keepers = _replicas(server, clock, "ab", shards=2)
    for _ in range(40):
        _step(keepers, clock)
    leaving = keepers.pop("a")
    (given,) = leaving.held()
    leaving.release_all()
    assert member_name("specops", "a") not in server.objects
    _step(keepers, clock)
    assert keepers["b"].held() == {0, 1}
    assert given in keepers["b"].held()


def test_a_replica_cut_off_from_the_api_server_stops_acting_before_anyone_takes_over() -> None:
    server, clock = _LeaseServer(), [0.0]
    (keeper,) = _replicas(server, clock, "a", shards=1).values()
    keeper.round()
    uid = next(u for u in (f"uid-{i}" for i in range(10)) if keeper.shard(u) == 0)
    assert keeper.holds(uid)
    server.down = True
    clock[0] += keeper.settings.act_s
    with pytest.raises(KubeApiError):
        keeper.round()
    assert not keeper.holds(uid)
    with keeper.acting(uid) as ours:
        assert not ours


def test_a_release_waits_for_the_reconciliation_in_flight_on_its_shard() -> None:
    server, clock = _LeaseServer(), [0.0]
    keepers = _replicas(server, clock, "a", shards=1)
    keeper = keepers["a"]
    keeper.round()
    uid = next(u for u in (f"uid-{i}" for i in range(10)) if keeper.shard(u) == 0)
    released = threading.Event()
    with keeper.acting(uid) as ours:
        assert ours

        def release() -> None:
            keeper.release_all()
            released.set()

        releasing = threading.Thread(target=release)
        releasing.start()
        assert not released.wait(0.3)  # held back while the reconciliation runs
        assert not keeper.holds(uid)  # but no new one starts
    releasing.join(5.0)
    assert released.is_set()
    assert "holderIdentity" not in server.objects[lease_name("specops", 0)]["spec"]


def test_the_rounds_run_on_their_own_thread_until_stopped_and_then_hand_the_shards_back() -> None:
    server = _LeaseServer()
    keeper = ShardKeeper(server, _settings("a", shards=2))
    keeper.start()
    try:
        deadline = time.monotonic() + 10.0
        while keeper.held() != {0, 1}:
            assert time.monotonic() < deadline, "the first round never ran"
            time.sleep(0.05)
        server.down = True  # a failing round is logged, and the next one tries again
        time.sleep(2 * keeper.settings.poll_s)
        server.down = False
    finally:
        keeper.stop()
    assert not keeper.held()
    shards = [o for o in server.objects.values() if o["metadata"]["labels"].get("specops.io/shard")]
    assert len(shards) == 2 and all("holderIdentity" not in o["spec"] for o in shards)
    assert member_name("specops", "a") not in server.objects


class _Recording(kubernetes.client.ApiClient):
    """An API client that records each request it is given and answers it with ``{}``."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def call_api(self, method: str, url: str, *_: Any, **__: Any) -> Any:
        self.sent.append(f"{method} {urllib.parse.urlsplit(url).path}")
        return kubernetes.client.rest.RESTResponse(_Answer())


class _Answer:
    """What urllib3 would hand back: 200 with an empty JSON object."""

    def __init__(self) -> None:
        self.status, self.reason, self.data = 200, "OK", b"{}"
        self.headers: dict[str, str] = {}

    def read(self) -> bytes:
        return self.data


def test_a_reconciliation_that_outlasts_its_hold_writes_nothing_more() -> None:
    server, clock = _LeaseServer(), [0.0]
    keeper = _replicas(server, clock, "a", shards=1)["a"]
    keeper.round()
    uid = next(u for u in (f"uid-{i}" for i in range(10)) if keeper.shard(u) == 0)
    api = _Recording()
    kube = Kube(api)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"namespace": "ml", "name": "llama"},
    }
    path = "/apis/apps/v1/namespaces/ml/deployments/llama"
    with keeper.acting(uid) as ours:
        assert ours
        kube.delete(deployment)  # while the hold stands, a write goes out
        clock[0] += keeper.settings.act_s  # no renewal came: the hold has lapsed
        with pytest.raises(KubeApiError, match="not sent: this replica no longer holds shard 0"):
            kube.delete(deployment)
        kube.get(deployment)  # a read writes nothing: it still goes out
    assert api.sent == [f"DELETE {path}", f"GET {path}"]
    kube.delete(deployment)  # outside a fenced block nothing holds it back
    assert api.sent[-1] == f"DELETE {path}"


def test_the_lease_rounds_never_wait_behind_the_rate_limits_queue() -> None:
    """A fleet's edits can queue seconds of requests: a round behind them renews late."""
    server, clock = _LeaseServer(), [0.0]
    keepers = _replicas(server, clock, "ab", shards=2)
    for _ in range(20):
        _step(keepers, clock)
    keepers["a"].release_all()
    assert server.version > 5 and server.queued == []
