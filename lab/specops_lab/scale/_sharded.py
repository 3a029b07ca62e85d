"""Sharded operators judged from the API server's audit log (pure): which replica wrote each
service's objects, and whether any service was written by two replicas in turn."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from specops_lab.scale._audit import AuditRequest

__all__ = ["ShardRun", "overlapping", "writers_by_service"]

# What the operator writes for a service, all under the service's own name.
_OWNED = frozenset(
    {
        "speculativeservices",
        "speculativeservices/status",
        "deployments",
        "services",
        "poddisruptionbudgets",
        "podmonitors",
    }
)
# The User-Agent prefix of the operator's own client; kopf's requests carry kopf's.
AGENT_PREFIX = "specops-operator/"


def writers_by_service(
    requests: Iterable[AuditRequest], services: Collection[str]
) -> dict[str, list[str]]:
    """The replicas that wrote each service's objects, in the order of their writes."""
    writers: dict[str, list[tuple[float, str]]] = {}
    for request in requests:
        if (
            request.writes
            and request.agent.startswith(AGENT_PREFIX)
            and request.resource in _OWNED
            and request.name in services
        ):
            writers.setdefault(request.name, []).append((request.at, request.agent))
    return {name: [agent for _, agent in sorted(writes)] for name, writes in writers.items()}


def overlapping(writers: Mapping[str, list[str]]) -> tuple[str, ...]:
    """The services a replica wrote again after another replica had written them: a shard
    handed over once (A, then B) is not an overlap; A, B, A is two replicas acting at once."""
    found = []
    for name, agents in sorted(writers.items()):
        runs = [a for i, a in enumerate(agents) if i == 0 or agents[i - 1] != a]
        if len(runs) != len(set(runs)):
            found.append(name)
    return tuple(found)


@dataclass(frozen=True)
class ShardRun:
    """The sharded phase: replicas sharing the fleet, one of them killed.

    ``settled_s``: from the replicas' start until every shard is held, each replica holding
    its fair share. ``moved_s``: from the kill until every shard of the killed replica is
    held by another. ``edit_after_move_s``: a user's edit of a service of a moved shard until
    its Deployment carries it. ``None``: did not happen within the phase's timeout.
    ``every_edit_applied``: every service was edited before the kill and again after the
    move, and every Deployment carried each edit (the writes the overlap check reads)."""

    replicas: int
    shards: int
    lease_s: float
    settled_s: float | None
    moved_s: float | None
    edit_after_move_s: float | None
    every_edit_applied: bool
    writers: int  # distinct replicas seen writing services' objects
    services_written: int
    overlaps: tuple[str, ...]
