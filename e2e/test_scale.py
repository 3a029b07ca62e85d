"""The fleet-scale benchmark on the real control plane, at a small fleet: every phase runs and
measures what it says (the targets themselves are the benchmark's to print, not a test's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from specops_lab.cluster import ClusterInfo
from specops_lab.scale import ScaleOptions, ScaleTargets, judge, render_table, run_scale

pytestmark = pytest.mark.e2e


def test_a_small_fleet_is_created_edited_taken_over_and_shared_by_sharded_replicas(
    cluster: ClusterInfo, tmp_path: Path
) -> None:
    # The session's cluster has two fake GPU nodes.
    options = ScaleOptions(
        services=6,
        pods_per_service=1,
        gpu_nodes=2,
        # 18 services over 3 shards: the killed replica's shard holds one of them but for
        # a chance of (2/3)^18, under 0.1 %.
        burst=12,
        edits=4,
        steady_s=20.0,
        timeout_s=120.0,
        shard_replicas=3,
        shards=3,
        shard_lease_s=8.0,
    )
    figures = run_scale(options, tmp_path, print, cluster)
    table = render_table(figures, ScaleTargets(), "pytest e2e/test_scale.py")
    print(table)
    assert figures.created_s is not None, table
    assert figures.burst_created_s is not None, table
    # Every edit reached its Deployment; the edits ran while the burst was being created.
    assert figures.edits_lost == 0 and figures.edit_latencies_s, table
    assert figures.restart_converged_s is not None, table
    # The audit log saw the operator: the new process's first pass lists and watches what
    # it owns (the steady window may rightly see nothing: resyncs read from memory).
    assert figures.restart_requests >= options.services, table
    assert figures.steady_writes <= figures.steady_requests
    assert figures.rss_peak_mib > 0, table
    # The creation's cost: each service's Deployment written at least, the operator's CPU a
    # share of the machine's, and what bound it said.
    creation = figures.creation
    assert creation is not None and creation.requests >= creation.limited >= options.services, table
    assert 0 < creation.operator_cpu_s <= creation.machine_cpu_s <= creation.capacity_cpu_s, table
    assert (creation.limit_qps, creation.limit_burst) == (50, 100) and "Bound by" in table, table
    # Three replicas took a shard each; a killed one's shard moved about a Lease period
    # later (plus the rounds that saw it, on a machine this test shares), and a service of
    # it was then edited through the new holder. Every service was edited before the kill
    # (each replica wrote its share) and after: no service was written by two in turn.
    sharded = figures.shards
    assert sharded is not None and sharded.settled_s is not None, table
    assert sharded.moved_s is not None and sharded.moved_s <= 2 * sharded.lease_s, table
    assert sharded.edit_after_move_s is not None, table
    assert sharded.every_edit_applied, table
    assert sharded.overlaps == () and sharded.writers == 3, table
    assert len(judge(figures, ScaleTargets())) == 8
    assert (tmp_path / "figures.yaml").exists()
