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
    OPERATOR_DECISIONS,
    OPERATOR_MODE,
    OPERATOR_RECONFIGURATIONS,
    OPERATOR_ROLLBACKS,
    OPERATOR_SPECULATIVE_TOKENS,
    counted,
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


def _panel(dashboard: str, title: str) -> dict[str, Any]:
    (panel,) = [p for p in iter_panels(_models()[dashboard]) if p["title"] == title]
    return panel


def test_the_fleet_table_shows_mode_and_k_in_force_and_what_the_controller_did() -> None:
    panel = _panel("specops-fleet.json", "SpeculativeServices")
    exprs = {target["refId"]: target["expr"] for target in panel["targets"]}
    assert all(t["instant"] and t["format"] == "table" for t in panel["targets"])
    organize = next(t["options"] for t in panel["transformations"] if t["id"] == "organize")
    headers = {
        organize["renameByName"][f"Value #{ref}"]: expr
        for ref, expr in exprs.items()
        if f"Value #{ref}" in organize["renameByName"]
    }
    assert OPERATOR_SPECULATIVE_TOKENS in headers["k in force"]
    assert OPERATOR_RECONFIGURATIONS in headers["Reconfigurations"]
    assert OPERATOR_ROLLBACKS in headers["Rollbacks"]
    assert 'action="Withhold"' in headers["Withheld"]
    # The mode is a label: its column shows the label, and the query's value (1) is hidden.
    (mode_ref,) = [ref for ref, expr in exprs.items() if OPERATOR_MODE in expr]
    assert exprs[mode_ref].endswith("== 1)")
    assert organize["renameByName"]["mode"] == "Mode"
    assert organize["excludeByName"][f"Value #{mode_ref}"] is True


def test_withheld_decisions_are_totalled_over_the_range_by_reason() -> None:
    panel = _panel("specops-fleet.json", "Decisions withheld, by reason")
    (target,) = panel["targets"]
    assert panel["type"] == "bargauge"
    assert target["instant"] is True
    assert target["expr"] == counted(
        OPERATOR_DECISIONS,
        'namespace=~"$namespace", service=~"$service", action="Withhold"',
        "$__range",
        ("namespace", "service", "reason"),
    )
    assert "{{reason}}" in target["legendFormat"]


def test_counted_takes_a_series_born_in_the_window_whole() -> None:
    assert counted("m_total", 'a="b"', "1h", ("a",)) == (
        'sum by (a) ((m_total{a="b"} unless m_total{a="b"} offset 1h) '
        'or increase(m_total{a="b"}[1h]))'
    )


def test_the_overview_names_the_mode_in_force() -> None:
    panel = _panel("specops-overview.json", "Mode")
    (target,) = panel["targets"]
    assert OPERATOR_MODE in target["expr"] and target["expr"].endswith("== 1)")
    assert target["legendFormat"] == "{{mode}}"
    assert panel["options"]["textMode"] == "name"
