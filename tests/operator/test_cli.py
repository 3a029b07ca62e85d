"""What ``specops operator`` tells kopf about the namespaces it serves."""

from specops_operator._cli import peering_priority, settings_for


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
