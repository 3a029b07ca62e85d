"""The shard Leases on the API server: read them, write what :func:`plan_leases` says, and
tell the handlers which services this replica acts on now."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from specops.errors import SpecopsError
from specops_operator._cache import MANAGED_BY
from specops_operator._kube import CONFLICT, Kube, KubeApiError, fenced, object_ref
from specops_operator._metrics import SHARD_MOVES, SHARDS_HELD
from specops_operator._shards import (
    Lease,
    LeasePlan,
    LeaseRole,
    ShardSettings,
    Sightings,
    lease_name,
    member_name,
    plan_leases,
    shard_of,
)

__all__ = ["GROUP_LABEL", "ROLE_LABEL", "ShardKeeper", "ShardRound"]

Obj = dict[str, Any]
GROUP_LABEL = "specops.io/lease-group"
ROLE_LABEL = "specops.io/lease-role"
SHARD_LABEL = "specops.io/shard"
_API = "coordination.k8s.io/v1"
# Seconds a release waits for the reconciliations in flight on its shard to end.
_RELEASE_WAIT_S = 30.0
_log = logging.getLogger("specops.shards")


@dataclass(frozen=True)
class ShardRound:
    """The shards this replica started acting on in a round, and those it lost (taken by
    another, or not renewed in time; a release is not a loss)."""

    gained: frozenset[int] = frozenset()
    lost: frozenset[int] = frozenset()


def _micro_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _read(obj: Obj) -> Lease | None:
    """A Lease object as :class:`Lease`, None for one not of the shape this module writes."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        role = LeaseRole(labels.get(ROLE_LABEL, ""))
        index = int(labels[SHARD_LABEL]) if role is LeaseRole.SHARD else None
    except (ValueError, KeyError):
        return None
    holder = (obj.get("spec") or {}).get("holderIdentity") or None
    return Lease(meta["name"], role, holder, str(meta.get("resourceVersion", "")), index)


class ShardKeeper:
    """This replica's shards: which it holds and since when it renewed them. Rounds run on
    one thread; the handlers ask from theirs."""

    def __init__(
        self, kube: Kube, settings: ShardSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kube, self.settings, self._clock = kube, settings, clock
        self._sightings = Sightings()
        self._renewed_at: dict[str, float] = {}  # Lease name -> this replica's clock
        self._held: dict[int, float] = {}  # shard -> when its Lease was last written by us
        self._busy: dict[int, int] = {}
        self._reported: frozenset[int] = frozenset()  # held at the end of the last round
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the handlers ask ---------------------------------------------------------

    def shard(self, uid: str) -> int:
        return shard_of(uid, self.settings.shards)

    def holds(self, uid: str) -> bool:
        """Whether this replica acts on the service with ``uid`` now: it holds the shard's
        Lease and renewed it recently enough (:attr:`ShardSettings.act_s`)."""
        with self._lock:
            return self._acts(self.shard(uid))

    def _acts(self, shard: int) -> bool:
        written = self._held.get(shard)
        return written is not None and self._clock() - written < self.settings.act_s

    @contextlib.contextmanager
    def acting(self, uid: str) -> Iterator[bool]:
        """Whether this replica acts on the service; while the block runs, the shard is not
        released (a release waits for it), so a handover never splits a reconciliation, and
        its writes are fenced (:func:`fenced`): once the hold lapses (renewals failing or
        late), what is left of the block writes nothing."""
        shard = self.shard(uid)
        with self._lock:
            ours = self._acts(shard)
            if ours:
                self._busy[shard] = self._busy.get(shard, 0) + 1
        try:
            if not ours:
                yield ours
            else:
                with fenced(lambda: self.holds(uid), f"this replica no longer holds shard {shard}"):
                    yield ours
        finally:
            if ours:
                with self._lock:
                    self._busy[shard] -= 1
                    self._lock.notify_all()

    def held(self) -> frozenset[int]:
        with self._lock:
            return frozenset(s for s in self._held if self._acts(s))

    # -- rounds --------------------------------------------------------------------------

    def start(self) -> None:
        """Run a round every poll interval on a thread of its own, until :meth:`stop`: not
        a task of the operator's event loop, which a busy fleet keeps late for seconds."""
        self._thread = threading.Thread(target=self._rounds, name="specops-shards", daemon=True)
        self._thread.start()

    def _rounds(self) -> None:
        while not self._stopping.is_set():
            try:
                self.round()
            except SpecopsError as exc:  # the held shards lapse by themselves (see holds)
                _log.warning("shard Lease round failed: %s", exc)
            self._stopping.wait(self.settings.poll_s)

    def stop(self) -> None:
        """End the rounds and hand every shard back (:meth:`release_all`)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.lease_s)
        self.release_all()

    def round(self) -> ShardRound:
        """Read the Leases, write this round's plan; the shards gained and lost since the
        last round (lost also by a renewal that came too late)."""
        before = self._reported
        now = self._clock()
        leases = self._leases()
        self._sightings.see(leases, now)
        plan = plan_leases(leases, self._sightings, self.settings, now, self._renewed_at)
        self._write(plan, now)
        after = self._reported = self.held()
        SHARDS_HELD.set(len(after))
        released = {lease.index for lease in plan.release}
        gained, lost = after - before, before - after - released
        for direction, shards in (("gained", gained), ("lost", lost)):
            if shards:
                SHARD_MOVES.labels(direction).inc(len(shards))
                _log.info(
                    "shards %s: %s (live replicas %d, share %d)",
                    direction,
                    sorted(shards),
                    plan.live,
                    plan.share,
                )
        return ShardRound(frozenset(gained), frozenset(lost))

    def _leases(self) -> list[Lease]:
        """The group's Leases as the API server holds them now. Read ahead of the rate
        limit's queue, as they are written: a round late behind a fleet's edits would renew
        its Leases too late, and the replicas would take each other's shards in turn."""
        with self.kube.urgent():
            listed = self.kube.list_objects(
                _API,
                "Lease",
                self.settings.namespace,
                {MANAGED_BY: "specops", GROUP_LABEL: self.settings.group},
            )
        return [lease for lease in map(_read, listed) if lease is not None]

    def _write(self, plan: LeasePlan, now: float) -> None:
        with self._lock:  # shards neither kept nor renewed are no longer ours
            for shard in set(self._held) - set(plan.held):
                self._held.pop(shard)
        for lease in plan.release:
            self._release(lease)
        for index in plan.create:
            self._claim(self._shard_body(index, None), lease_name(self.settings.group, index))
        for lease in (*plan.take, *plan.renew):
            if lease.index is not None:
                self._claim(self._shard_body(lease.index, lease), lease.name)
        me = member_name(self.settings.group, self.settings.identity)
        if plan.create_member:
            self._write_member(None, me, now)
        elif plan.renew_member is not None:
            self._write_member(plan.renew_member, me, now)
        for dead in plan.forget:
            with contextlib.suppress(KubeApiError):  # gone already, or alive again
                self.kube.delete(self._ref(dead.name), version=dead.version)

    def _ref(self, name: str) -> Obj:
        return object_ref(_API, "Lease", self.settings.namespace, name)

    def _body(self, name: str, role: LeaseRole, lease: Lease | None, holder: str | None) -> Obj:
        labels = {MANAGED_BY: "specops", GROUP_LABEL: self.settings.group, ROLE_LABEL: role}
        meta: Obj = {**self._ref(name)["metadata"], "labels": labels}
        if lease is not None:
            meta["resourceVersion"] = lease.version
        stamp = _micro_time(time.time())
        spec: Obj = {"leaseDurationSeconds": max(1, round(self.settings.lease_s))}
        if holder is not None:
            spec |= {"holderIdentity": holder, "renewTime": stamp}
            if lease is None or lease.holder != holder:
                spec["acquireTime"] = stamp
        return {"apiVersion": _API, "kind": "Lease", "metadata": meta, "spec": spec}

    def _shard_body(self, index: int, lease: Lease | None) -> Obj:
        name = lease_name(self.settings.group, index)
        body = self._body(name, LeaseRole.SHARD, lease, self.settings.identity)
        body["metadata"]["labels"][SHARD_LABEL] = str(index)
        return body

    def _send(self, body: Obj, existing: bool) -> bool:
        """Create or replace a Lease; False when another replica wrote it first."""
        try:
            with self.kube.urgent():  # a renewal late behind the rate limit would lose the shard
                (self.kube.replace if existing else self.kube.create)(body)
        except KubeApiError as exc:
            if exc.status == CONFLICT:
                return False
            raise
        return True

    def _claim(self, body: Obj, name: str) -> None:
        """Write a shard's Lease to this replica; on success, act on it from now."""
        started = self._clock()
        index = int(body["metadata"]["labels"][SHARD_LABEL])
        if not self._send(body, existing="resourceVersion" in body["metadata"]):
            with self._lock:  # another replica wrote it since it was read: not ours now
                self._held.pop(index, None)
            return
        self._renewed_at[name] = started
        with self._lock:
            # From when the write was sent: the taker's period started no earlier.
            self._held[index] = started

    def _write_member(self, lease: Lease | None, name: str, now: float) -> None:
        body = self._body(name, LeaseRole.MEMBER, lease, self.settings.identity)
        if self._send(body, existing=lease is not None):
            self._renewed_at[name] = now

    def _release(self, lease: Lease) -> None:
        """Stop acting on a shard, wait for what is in flight on it, and hand it back."""
        assert lease.index is not None
        with self._lock:
            self._held.pop(lease.index, None)
            self._lock.wait_for(lambda: not self._busy.get(lease.index or 0), _RELEASE_WAIT_S)
        body = self._body(lease.name, LeaseRole.SHARD, lease, None)
        body["metadata"]["labels"][SHARD_LABEL] = str(lease.index)
        with contextlib.suppress(KubeApiError):  # taken meanwhile, or expired: no longer ours
            self._send(body, existing=True)
        self._renewed_at.pop(lease.name, None)
        SHARD_MOVES.labels("released").inc()
        _log.info("shard %d released", lease.index)

    def release_all(self) -> None:
        """At shutdown: hand every shard back and leave the members, so the others take
        over at once instead of after a Lease period."""
        me = self.settings.identity
        for lease in self._leases():
            if lease.holder != me:
                continue
            if lease.role is LeaseRole.SHARD:
                self._release(lease)
            else:
                with contextlib.suppress(KubeApiError), self.kube.urgent():
                    self.kube.delete(self._ref(lease.name), version=lease.version)
        SHARDS_HELD.set(0)
