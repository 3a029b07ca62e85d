"""Who wrote each service, from the audit log, and the sharded phase's targets."""

from __future__ import annotations

from dataclasses import replace

from specops_lab.scale import AuditRequest, ScaleTargets, judge, render_table
from specops_lab.scale._sharded import ShardRun, overlapping, writers_by_service

from tests.lab.scale.test_figures import FIGURES


def _write(at: float, agent: str, name: str, resource: str = "deployments") -> AuditRequest:
    return AuditRequest(
        at=at,
        user="system:serviceaccount:specops:specops",
        verb="patch",
        resource=resource,
        namespace="fleet",
        name=name,
        code=200,
        agent=agent,
    )


A, B = "specops-operator/shard-0", "specops-operator/shard-1"


def test_writers_are_the_operators_own_writes_of_each_services_objects_in_time_order() -> None:
    requests = [
        _write(2.0, B, "svc-1", "speculativeservices/status"),
        _write(1.0, A, "svc-1"),
        _write(1.5, "kopf/1.45.2", "svc-1", "speculativeservices"),  # kopf's, not ours
        _write(1.7, A, "svc-1", "events"),  # not the service's objects
        _write(3.0, A, "svc-10"),  # not a service of the fleet asked about
        replace(_write(1.2, B, "svc-1"), verb="get"),  # a read
    ]
    assert writers_by_service(requests, {"svc-1", "svc-2"}) == {"svc-1": [A, B]}


def test_a_handover_is_no_overlap_but_a_return_is() -> None:
    writers = {"svc-1": [A, A, B, B], "svc-2": [A, B, A], "svc-3": [B]}
    assert overlapping(writers) == ("svc-2",)


RUN = ShardRun(
    replicas=3,
    shards=3,
    lease_s=15.0,
    settled_s=4.0,
    moved_s=12.5,
    edit_after_move_s=0.8,
    every_edit_applied=True,
    writers=3,
    services_written=400,
    overlaps=(),
)


def test_the_sharded_targets_join_the_table_when_the_phase_ran() -> None:
    assert len(judge(FIGURES, ScaleTargets())) == 6
    verdicts = judge(replace(FIGURES, shards=RUN), ScaleTargets())
    assert len(verdicts) == 8
    moved, overlaps = verdicts[-2:]
    assert moved.met and moved.measured == "12.5 s" and "15 s" in moved.goal
    assert overlaps.met and overlaps.measured == "0"
    table = render_table(replace(FIGURES, shards=RUN), ScaleTargets(), "specops scale")
    assert "Sharded: 3 replicas" in table and "0.8 s" in table


def test_a_slow_move_an_overlap_or_no_writes_at_all_miss() -> None:
    late = replace(RUN, moved_s=16.0, overlaps=("svc-7",))
    moved, overlaps = judge(replace(FIGURES, shards=late), ScaleTargets())[-2:]
    assert not moved.met and not overlaps.met and "svc-7" in overlaps.measured
    unapplied = replace(RUN, every_edit_applied=False)
    assert not judge(replace(FIGURES, shards=unapplied), ScaleTargets())[-1].met
    silent = replace(RUN, moved_s=None, services_written=0)
    moved, overlaps = judge(replace(FIGURES, shards=silent), ScaleTargets())[-2:]
    assert moved.measured == "never" and not moved.met and not overlaps.met
