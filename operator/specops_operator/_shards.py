"""Which operator replica serves which SpeculativeService: shards and their Leases (pure).

Services are spread over ``shards`` by a stable hash of their uid. Each shard has a Lease
that one replica holds at a time; each replica also keeps a member Lease, so all of them see
how many are alive and take a fair share (``ceil(shards / live)``) each. A replica that dies
stops renewing: its Leases stop changing, and once another replica has seen one unchanged
for a whole Lease period it takes the shard over.

Expiry is judged on the observer's own clock (how long since *it* saw the Lease change),
never by comparing another machine's ``renewTime`` with its own, so skewed clocks cannot hand
one shard to two replicas. A holder acts on a shard only while its last renewal is younger
than two thirds of the period (:attr:`ShardSettings.act_s`): by the time a taker has seen the
Lease unchanged for a period less one poll (:attr:`ShardSettings.take_after_s`), the old
holder has stopped acting for a while.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "Lease",
    "LeasePlan",
    "LeaseRole",
    "ShardSettings",
    "Sightings",
    "lease_name",
    "member_name",
    "plan_leases",
    "shard_of",
]


def shard_of(uid: str, shards: int) -> int:
    """The shard of the service with ``uid``: the same on every replica and every restart."""
    digest = hashlib.sha256(uid.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


@dataclass(frozen=True)
class ShardSettings:
    """How many shards, who this replica is, and where and how long its Leases are."""

    shards: int
    identity: str
    namespace: str
    group: str = "specops"
    lease_s: float = 15.0

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"shards must be at least 1, not {self.shards}")
        if self.lease_s < 3:
            raise ValueError(f"the Lease period must be at least 3 s, not {self.lease_s}")

    @property
    def renew_s(self) -> float:
        """How often the held Leases are renewed: three times a period."""
        return self.lease_s / 3

    @property
    def act_s(self) -> float:
        """How old the last renewal may be while this replica still acts on the shard."""
        return 2 * self.lease_s / 3

    @property
    def poll_s(self) -> float:
        """How often the Leases are read: free shards are seen soon, renewals stay in time."""
        return min(2.0, self.lease_s / 5)

    @property
    def take_after_s(self) -> float:
        """How long a shard's Lease must stand unchanged in this replica's sight before it
        takes the shard over: a period less one poll, since it saw the last renewal up to a
        poll after it was written. Still longer than :attr:`act_s` after that renewal, so
        the old holder has stopped acting first."""
        return self.lease_s - self.poll_s


def _dns_label(text: str) -> str:
    """``text`` as a lowercase DNS label part (a pod name already is one)."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:40] or "replica"


def lease_name(group: str, index: int) -> str:
    return f"{group}-shard-{index}"


def member_name(group: str, identity: str) -> str:
    # The identity's own digest keeps two long names that share a prefix apart.
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    return f"{group}-member-{_dns_label(identity)}-{digest}"


class LeaseRole(StrEnum):
    SHARD = "shard"
    MEMBER = "member"


@dataclass(frozen=True)
class Lease:
    """A Lease as read: its name, holder (None when released) and resourceVersion."""

    name: str
    role: LeaseRole
    holder: str | None
    version: str
    index: int | None = None  # the shard's, for a shard's Lease


@dataclass
class Sightings:
    """When this replica last saw each Lease change, by its own clock."""

    changed_at: dict[str, tuple[str, float]] = field(default_factory=dict)

    def see(self, leases: Sequence[Lease], now: float) -> None:
        names = {lease.name for lease in leases}
        for lease in leases:
            seen = self.changed_at.get(lease.name)
            if seen is None or seen[0] != lease.version:
                self.changed_at[lease.name] = (lease.version, now)
        for gone in set(self.changed_at) - names:
            del self.changed_at[gone]

    def expired(self, lease: Lease, now: float, unchanged_s: float) -> bool:
        """Whether ``lease`` has stood unchanged for ``unchanged_s`` in this replica's sight."""
        seen = self.changed_at.get(lease.name)
        return seen is not None and seen[0] == lease.version and now - seen[1] >= unchanged_s


@dataclass(frozen=True)
class LeasePlan:
    """One round's writes, and the replicas counted alive (this one included) with the share
    of shards each takes. ``held`` are the shards this replica keeps (renewed or not)."""

    create: tuple[int, ...] = ()
    take: tuple[Lease, ...] = ()
    renew: tuple[Lease, ...] = ()
    release: tuple[Lease, ...] = ()
    held: tuple[int, ...] = ()
    create_member: bool = False
    renew_member: Lease | None = None
    forget: tuple[Lease, ...] = ()  # members dead in this replica's sight
    live: int = 1
    share: int = 0


def _preference(identity: str, shards: int) -> list[int]:
    """The order in which this replica tries free shards: rotated by its identity, so
    replicas starting together mostly ask for different ones."""
    start = shard_of(identity, shards)
    return [(start + i) % shards for i in range(shards)]


def plan_leases(
    leases: Sequence[Lease],
    sightings: Sightings,
    settings: ShardSettings,
    now: float,
    renewed_at: Mapping[str, float],
) -> LeasePlan:
    """What this replica writes this round, from the Leases just read (after
    ``sightings.see`` of them) and when it last renewed each of its own (``renewed_at``).

    A shard is free when its Lease is missing, released, or expired in this replica's
    sight (unchanged for :attr:`ShardSettings.take_after_s`); a member counts alive until
    its Lease expires so, and is forgotten then. Shards
    above this replica's share are released, the lowest in its preference first."""
    me, unchanged_s = settings.identity, settings.take_after_s
    others = [m for m in leases if m.role is LeaseRole.MEMBER and m.holder != me]
    dead = tuple(m for m in others if sightings.expired(m, now, unchanged_s))
    live = 1 + len(others) - len(dead)
    share = math.ceil(settings.shards / live)
    by_index: Mapping[int, Lease] = {
        lease.index: lease
        for lease in leases
        if lease.role is LeaseRole.SHARD and lease.index is not None
    }
    order = _preference(me, settings.shards)
    mine = [by_index[i] for i in order if i in by_index and by_index[i].holder == me]
    keep, release = mine[:share], mine[share:]
    create: list[int] = []
    take: list[Lease] = []
    room = share - len(keep)
    for index in order:
        if room <= 0:
            break
        lease = by_index.get(index)
        if lease is None:
            create.append(index)
        elif lease.holder != me and (
            lease.holder is None or sightings.expired(lease, now, unchanged_s)
        ):
            take.append(lease)
        else:
            continue
        room -= 1

    def due(lease: Lease) -> bool:
        return now - renewed_at.get(lease.name, -math.inf) >= settings.renew_s

    member = next((m for m in leases if m.role is LeaseRole.MEMBER and m.holder == me), None)
    return LeasePlan(
        create=tuple(create),
        take=tuple(take),
        renew=tuple(lease for lease in keep if due(lease)),
        release=tuple(release),
        held=tuple(lease.index for lease in keep if lease.index is not None),
        create_member=member is None,
        renew_member=member if member is not None and due(member) else None,
        forget=dead,
        live=live,
        share=share,
    )
