"""The dashboards in the chart are what the code builds, and each is usable as it stands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from specops.cli import main
from specops.dashboards import (
    DASHBOARDS,
    iter_panels,
    render_dashboards,
    stale_dashboards,
    substitute,
)
from specops.errors import MetricsError

REPO = Path(__file__).resolve().parents[2]
CHART_DASHBOARDS = REPO / "charts" / "specops" / "dashboards"


def _models() -> dict[str, dict[str, Any]]:
    return {name: json.loads(text) for name, text in render_dashboards().items()}


def test_committed_dashboards_match_the_code() -> None:
    assert stale_dashboards(CHART_DASHBOARDS) == [], "run `specops dashboards` and commit"


def test_the_command_writes_and_checks(tmp_path: Path) -> None:
    runner = CliRunner()
    checked = runner.invoke(main, ["dashboards", "--directory", str(tmp_path), "--check"])
    assert checked.exit_code != 0
    assert "specops-overview.json" in checked.output
    (tmp_path / "retired.json").write_text("{}", encoding="utf-8")
    written = runner.invoke(main, ["dashboards", "--directory", str(tmp_path)])
    assert written.exit_code == 0, written.output
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(DASHBOARDS)
    assert (
        runner.invoke(main, ["dashboards", "--directory", str(tmp_path), "--check"]).exit_code == 0
    )


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_has_the_variables_and_unique_ids(name: str) -> None:
    model = _models()[name]
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert set(variables) == {"datasource", "namespace", "service"}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in model["panels"]]
    assert len(ids) == len(set(ids))
    assert model["uid"].startswith("specops-")


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_panel_queries_the_selected_datasource_and_services(name: str) -> None:
    model = _models()[name]
    panels = list(iter_panels(model))
    assert panels
    for panel in panels:
        assert panel["title"] and panel["description"], panel
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert "$namespace" in target["expr"], panel["title"]
            assert "$service" in target["expr"], panel["title"]


def test_panels_do_not_overlap() -> None:
    for model in _models().values():
        cells: set[tuple[int, int]] = set()
        for panel in model["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24
            area = {
                (x, y)
                for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])
            }
            assert not cells & area, panel["title"]
            cells |= area


def test_variables_are_substituted_as_grafana_does() -> None:
    expr = 'rate(m{namespace=~"$namespace", service="${service}"}[$__rate_interval])'
    variables = {"namespace": "llm", "service": "llama", "__rate_interval": "1m"}
    assert substitute(expr, variables) == 'rate(m{namespace=~"llm", service="llama"}[1m])'
    with pytest.raises(MetricsError, match=r"\$pod"):
        substitute('m{pod="$pod"}', variables)
