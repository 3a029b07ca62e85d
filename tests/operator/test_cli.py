"""What ``specops operator`` tells kopf about the namespaces it serves."""

from specops_operator._cli import settings_for


def test_exact_namespaces_need_no_cluster_wide_scanning() -> None:
    assert settings_for(("ml", "serving")).scanning.disabled


def test_cluster_wide_and_globs_keep_scanning() -> None:
    assert not settings_for(()).scanning.disabled
    assert not settings_for(("ml", "team-*")).scanning.disabled
