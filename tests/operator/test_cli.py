"""What ``specops operator`` tells kopf about the namespaces it serves."""

from click.testing import CliRunner
from specops_operator._cli import operator, peering_priority, settings_for, shard_settings


def test_exact_namespaces_need_no_cluster_wide_scanning() -> None:
    assert settings_for(("ml", "serving")).scanning.disabled


def test_cluster_wide_and_globs_keep_scanning() -> None:
    assert not settings_for(()).scanning.disabled
    assert not settings_for(("ml", "team-*")).scanning.disabled


def test_replicas_with_peering_draw_distinct_priorities_unless_one_is_given() -> None:
    drawn = {peering_priority("specops", None) for _ in range(8)}
    assert len(drawn) == 8
    assert peering_priority("specops", 7) == 7
    assert peering_priority(None, None) == 0


def test_a_sharded_replica_is_its_pod_and_keeps_its_leases_in_its_namespace() -> None:
    assert shard_settings(0, "specops", 15.0, {}) is None
    settings = shard_settings(6, "rel", 20.0, {"POD_NAME": "rel-7c9-x2", "POD_NAMESPACE": "ops"})
    assert settings is not None
    assert (settings.identity, settings.namespace, settings.group) == ("rel-7c9-x2", "ops", "rel")
    assert (settings.shards, settings.lease_s) == (6, 20.0)
    local = shard_settings(2, "specops", 15.0, {})
    assert local is not None and local.namespace == "default" and local.identity


def test_sharding_and_peering_together_are_refused_with_the_fix() -> None:
    result = CliRunner().invoke(operator, ["--shards=3", "--peering=specops"])
    assert result.exit_code == 2
    assert "choose one" in result.output
