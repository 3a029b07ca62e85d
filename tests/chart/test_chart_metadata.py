"""What Artifact Hub and a user browsing the chart read: icon, annotations, changelog."""

from __future__ import annotations

import yaml

from .chart_render import CHART_DIR

CHART = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
_CHANGE_KINDS = {"added", "changed", "deprecated", "removed", "fixed", "security"}


def test_the_icon_is_the_charts_own_file() -> None:
    prefix = "https://raw.githubusercontent.com/specops/specops/main/"
    assert CHART["icon"].startswith(prefix)
    icon = CHART_DIR.parents[1] / CHART["icon"].removeprefix(prefix)
    assert icon.is_file() and icon.read_text().lstrip().startswith("<svg")


def test_artifact_hub_annotations_are_well_formed() -> None:
    annotations = CHART["annotations"]
    changes = yaml.safe_load(annotations["artifacthub.io/changes"])
    assert changes and all(c["kind"] in _CHANGE_KINDS and c["description"] for c in changes)
    (crd,) = yaml.safe_load(annotations["artifacthub.io/crds"])
    assert crd["name"] == "speculativeservices.specops.io"
    crd_file = yaml.safe_load(
        (CHART_DIR / "crds" / "specops.io_speculativeservices.yaml").read_text()
    )
    assert crd["version"] in {v["name"] for v in crd_file["spec"]["versions"]}
    links = yaml.safe_load(annotations["artifacthub.io/links"])
    assert all(link["url"].startswith("https://") for link in links)
    assert annotations["artifacthub.io/operator"] == "true"


def test_the_changelog_has_the_charts_version() -> None:
    changelog = (CHART_DIR / "CHANGELOG.md").read_text()
    assert f"\n## {CHART['version']} " in changelog or f"\n## {CHART['version']}\n" in changelog
