"""The chart installs the CRDs the API generates, byte for byte."""

from __future__ import annotations

from .chart_render import CHART_DIR, REPO


def test_chart_crds_are_identical_copies_of_the_generated_ones() -> None:
    generated = sorted((REPO / "crds").glob("*.yaml"))
    assert generated, "crds/ holds no generated CRD"
    for source in generated:
        copy = CHART_DIR / "crds" / source.name
        assert copy.is_file(), f"{copy} is missing: cp {source} {copy}"
        assert copy.read_bytes() == source.read_bytes(), (
            f"{copy} differs from {source}; copy it again after `specops crd`"
        )


def test_chart_crds_hold_only_generated_files_and_kopf_peering() -> None:
    generated = {path.name for path in (REPO / "crds").glob("*.yaml")}
    shipped = {path.name for path in (CHART_DIR / "crds").glob("*.yaml")}
    assert shipped == generated | {"kopf.dev_peerings.yaml"}
