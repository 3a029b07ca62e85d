"""Alert rules: generated files current, valid for promtool, unit-tested, shipped by the chart."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from helm_python import _native

from specops.alerts import RULE_FILES, render_rules, rules_document, stale_rule_files

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "specops"
UNIT_TESTS = Path(__file__).with_name("specops.rules.test.yaml")
MONITORING_API = ["monitoring.coreos.com/v1", "monitoring.coreos.com/v1/PrometheusRule"]
ALERTS = {
    "SpecopsAcceptanceCollapsed",
    "SpecopsSpeculationSlowingService",
    "SpecopsMetricsStale",
    "SpecopsReconfigurationsFlapping",
    "SpecopsRolloutRolledBack",
    "SpecopsOperatorDown",
    "SpecopsOperatorReconcileFailing",
}

# Installed with Debian's prometheus package by scripts/bootstrap.
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False
    )


def _prometheus_rule_spec(values: dict[str, Any]) -> dict[str, Any]:
    # Chart.render does not pass api_versions through; the library underneath accepts it.
    with helm.Chart.load(CHART) as chart:
        rendered = json.loads(
            _native.call_string(
                "helm_render",
                chart._raw(),
                json.dumps(values),
                json.dumps({"name": "specops", "namespace": "ops", "api_versions": MONITORING_API}),
            )
        )
    rule: dict[str, Any] = yaml.safe_load(rendered["specops/templates/prometheusrule.yaml"])
    assert rule["kind"] == "PrometheusRule"
    spec: dict[str, Any] = rule["spec"]
    return spec


def test_every_alert_the_design_asks_for_is_there() -> None:
    alerts = {
        rule["alert"]
        for group in rules_document()["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert alerts == ALERTS


def test_shipped_rule_files_are_generated_from_the_code() -> None:
    assert stale_rule_files(REPO) == [], "run `specops alerts` and commit the result"


def test_stale_rule_files_are_detected(tmp_path: Path) -> None:
    assert stale_rule_files(tmp_path) == [tmp_path / path for path in RULE_FILES]
    for path in RULE_FILES:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(render_rules().replace("1.2", "1.3"), encoding="utf-8")
    assert len(stale_rule_files(tmp_path)) == len(RULE_FILES)


@pytest.mark.parametrize("path", RULE_FILES, ids=str)
def test_promtool_accepts_the_rule_files(path: Path) -> None:
    result = _promtool("check", "rules", str(REPO / path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass() -> None:
    result = _promtool("test", "rules", str(UNIT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_prometheus_rule_ships_the_same_rules(tmp_path: Path) -> None:
    spec = _prometheus_rule_spec({})
    assert spec == rules_document()
    rendered = tmp_path / "from-chart.rules.yaml"
    rendered.write_text(yaml.safe_dump(spec), encoding="utf-8")
    result = _promtool("check", "rules", str(rendered))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_chart_drops_disabled_alerts_and_adds_alert_labels() -> None:
    spec = _prometheus_rule_spec(
        {
            "prometheusRule": {
                "disabledAlerts": ["SpecopsReconfigurationsFlapping"],
                "alertLabels": {"team": "inference", "severity": "page"},
            }
        }
    )
    rules = [rule for group in spec["groups"] for rule in group["rules"]]
    alerts = {rule["alert"]: rule for rule in rules if "alert" in rule}
    assert set(alerts) == ALERTS - {"SpecopsReconfigurationsFlapping"}
    for rule in alerts.values():
        # The rule's own severity wins over a blanket label.
        assert rule["labels"]["team"] == "inference"
        assert rule["labels"]["severity"] in {"warning", "critical"}
    assert all("labels" not in rule for rule in rules if "record" in rule)


def test_an_unknown_disabled_alert_is_rejected_by_the_values_schema() -> None:
    with (
        helm.Chart.load(CHART) as chart,
        pytest.raises(helm.HelmValuesError, match="disabledAlerts"),
    ):
        chart.validate_schema({"prometheusRule": {"disabledAlerts": ["acceptance"]}})


def test_every_alert_links_its_section_of_the_runbooks() -> None:
    headings = {
        line.removeprefix("## ").strip()
        for line in (REPO / "docs" / "runbooks.md").read_text().splitlines()
        if line.startswith("## ")
    }
    rules = [r for g in rules_document()["groups"] for r in g["rules"] if "alert" in r]
    assert headings == {rule["alert"] for rule in rules}
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url.endswith("/docs/runbooks.md#" + rule["alert"].lower()), url


def test_every_alert_reads_only_specops_series() -> None:
    """No bare vLLM or up selector: those would match targets specops does not manage."""
    for group in rules_document()["groups"]:
        for rule in group["rules"]:
            expr = rule["expr"]
            for name in ("vllm:", "up{"):
                for start in (i for i in range(len(expr)) if expr.startswith(name, i)):
                    selector = expr[start : expr.index("}", start) + 1]
                    assert 'job="specops-' in selector, (rule.get("alert"), selector)
