"""Every panel's PromQL returns data from a real Prometheus scraping the simulated engine, the
sidecar and the operator's metrics under load; the recording rules do too; the overview is
drawn into a PNG.

Prometheus scrapes every second and labels the engine target the way the PodMonitor does
(namespace, service, pod); the sidecar's series carry those labels themselves, and so do the
operator's, which the control loop records from the sidecar's observations while the load runs
(see ``controller``) and which are scraped with the labels of the chart's ServiceMonitor.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from specops_lab.launch import specops_executable

from specops.dashboards import (
    OPERATOR_DECISIONS,
    OPERATOR_ROLLBACKS,
    counted,
    fetch_panels,
    iter_panels,
    query_range,
    render_dashboards,
    render_preview,
    substitute,
)
from specops.render import OPERATOR_JOB, PODS_JOB
from tests.dashboards.controller import (
    OPERATOR_TARGET_LABELS,
    drive_decisions,
    serving_operator_metrics,
)
from tests.processes import running_prometheus, running_sim_engine, running_specops

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "specops.rules.yaml"
PREVIEW = REPO / "out" / "dashboards" / "overview-preview.png"
NAMESPACE, SERVICE, POD = "llm", "llama", "llama-0"
LOAD_SECONDS = 30.0
VARIABLES = {
    "namespace": NAMESPACE,
    "service": SERVICE,
    "datasource": "prometheus",
    "__rate_interval": "10s",
    "__interval": "2s",
    "__range": "20s",
}


async def _load_and_decide(
    engine: str, sidecar: str, work: Path
) -> tuple[int, Counter[tuple[str, str]]]:
    """``LOAD_SECONDS`` of closed-loop load while the control loop decides; completed requests
    and the count of each (action, reason code) decided.

    The load runs in its own process, as clients do: in this one, every decision's pricing
    held the event loop and with it the clients, finished requests went unreplaced, the
    batch fell inside the sidecar's intervals (23 to 31 batched tokens a step at the same
    19 ms), the step-time fit read that as compute costing nothing at this size, and the
    crossovers went beyond the batch limit.
    """
    summary = work / "load.json"
    load = await asyncio.create_subprocess_exec(
        specops_executable(), "load", "--url", engine, "--model", SERVICE,
        "--concurrency", "8", "--duration", str(LOAD_SECONDS), "--max-tokens", "96",
        "--prompt", "Speculate, please.", "--output", str(summary),
        stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    decisions = await drive_decisions(
        sidecar, NAMESPACE, SERVICE, POD, engine_k=3, seconds=LOAD_SECONDS
    )
    assert await load.wait() == 0, "specops load failed"
    completed = json.loads(summary.read_text("utf-8"))["completed"]
    assert isinstance(completed, int)
    return completed, decisions


@dataclass(frozen=True)
class Stack:
    prometheus: httpx.Client
    decisions: Counter[tuple[str, str]]
    end: float
    """When the load's last scrapes were in: the panels are read over the 20 s before, so
    a test that runs later reads the same samples."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Engine, sidecar, the operator's metrics and Prometheus running, with ``LOAD_SECONDS``
    of load and decisions scraped."""
    work = tmp_path_factory.mktemp("stack")
    speculative = {"method": "eagle3", "model": "draft", "num_speculative_tokens": 3}
    # The sidecar is told the engine's batch limit, as the operator tells it, so the
    # crossovers it measures are sought as far as the engine can batch.
    batch_limit = ["--max-num-seqs", "1024"]
    # The 70B's steps, about twice the 8B's (under 10 ms at batch 8), leave the simulator's
    # CPU time per step well inside each step, so a slow or busy machine keeps the truth's
    # step rate.
    truth = ["--truth", "llama3.1-70b-h100-tp4"]
    engine_args = [
        "--model", SERVICE, "--speculative-config", json.dumps(speculative), *batch_limit, *truth
    ]  # fmt: skip
    with running_sim_engine(engine_args, work / "engine.log") as engine:
        sidecar_args = [
            "sidecar", "--source", "direct", "--engine-url", engine,
            "--namespace", NAMESPACE, "--pod", POD, "--service", SERVICE,
            "--scrape-interval", "1", "--window", "10", "--window", "30",
            "--prediction-window", "10", "--profile", "llama3.1-8b-h100", *batch_limit,
        ]  # fmt: skip
        with (
            running_specops(sidecar_args, "/healthz", work / "sidecar.log") as sidecar,
            serving_operator_metrics(NAMESPACE, SERVICE) as operator,
        ):
            # The jobs the operator's PodMonitor and the chart's ServiceMonitor set, which
            # the alerts select specops's own targets by.
            scrape_configs: list[dict[str, Any]] = [
                {
                    "job_name": PODS_JOB,
                    "honor_labels": True,
                    "static_configs": [
                        {
                            "targets": [engine.removeprefix("http://")],
                            "labels": {"namespace": NAMESPACE, "service": SERVICE, "pod": POD},
                        },
                        {"targets": [sidecar.removeprefix("http://")]},
                    ],
                },
                {
                    "job_name": OPERATOR_JOB,
                    "honor_labels": True,
                    "static_configs": [{"targets": [operator], "labels": OPERATOR_TARGET_LABELS}],
                },
            ]
            with running_prometheus(scrape_configs, work, rule_files=[RULES]) as url:
                completed, decisions = asyncio.run(_load_and_decide(engine, sidecar, work))
                assert completed > 0
                actions = {action for action, _reason in decisions}
                assert {"Withhold", "Reconfigure", "Rollback"} <= actions, decisions
                time.sleep(3)  # the last scrapes and rule evaluations
                with httpx.Client(base_url=url, timeout=30) as client:
                    yield Stack(client, decisions, time.time())


@pytest.fixture(scope="module")
def prometheus(stack: Stack) -> httpx.Client:
    return stack.prometheus


@pytest.fixture(scope="module")
def end(stack: Stack) -> float:
    return stack.end


def _models() -> dict[str, dict[str, Any]]:
    return {name: json.loads(text) for name, text in render_dashboards().items()}


# Panels whose series exist only while a canary runs, which needs two replicas: the stack
# runs one engine. Their queries are checked for validity here, their data by the operator's
# canary tests (tests/operator/test_control_kmock.py).
CANARY_PANELS = frozenset({"Canary: measured gain beside the prediction"})


def _targets(canary: bool = False) -> list[tuple[str, str, str]]:
    return [
        (name, panel["title"], target["expr"])
        for name, model in _models().items()
        for panel in iter_panels(model)
        for target in panel["targets"]
        if (panel["title"] in CANARY_PANELS) == canary
    ]


def _has_data(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(v)) for series in result for _, v in series["values"])


@pytest.mark.parametrize(("dashboard", "title", "expr"), _targets())
def test_panel_query_returns_data(
    prometheus: httpx.Client, end: float, dashboard: str, title: str, expr: str
) -> None:
    result = query_range(prometheus, substitute(expr, VARIABLES), end - 20, end, 1)
    assert _has_data(result), f"{dashboard} / {title}: no data for {expr}"


@pytest.mark.parametrize(("dashboard", "title", "expr"), _targets(canary=True))
def test_canary_panel_queries_are_valid_promql(
    prometheus: httpx.Client, end: float, dashboard: str, title: str, expr: str
) -> None:
    assert query_range(prometheus, substitute(expr, VARIABLES), end - 20, end, 1) == []


@pytest.mark.parametrize("dashboard", sorted(_models()))
def test_variables_list_the_service(prometheus: httpx.Client, dashboard: str) -> None:
    expected = {"namespace": NAMESPACE, "service": SERVICE}
    for variable in _models()[dashboard]["templating"]["list"]:
        if variable["type"] != "query":
            continue
        series, label = variable["query"].removeprefix("label_values(").rstrip(")").rsplit(", ", 1)
        found = prometheus.get(
            f"/api/v1/label/{label}/values", params={"match[]": substitute(series, VARIABLES)}
        ).json()
        assert expected[variable["name"]] in found["data"], variable["query"]


@pytest.mark.parametrize("dashboard", sorted(_models()))
def test_annotation_queries_are_valid_promql(
    prometheus: httpx.Client, end: float, dashboard: str
) -> None:
    for annotation in _models()[dashboard]["annotations"].get("list", []):
        query_range(prometheus, substitute(annotation["expr"], VARIABLES), end - 20, end, 1)


def test_the_overview_marks_the_first_reconfiguration(stack: Stack) -> None:
    """The service's first Reconfigure and Rollback create their series at 1."""
    (annotation,) = _models()["specops-overview.json"]["annotations"]["list"]
    expr = substitute(annotation["expr"], VARIABLES)
    result = query_range(stack.prometheus, expr, stack.end - LOAD_SECONDS - 10, stack.end, 1)
    assert any(float(v) > 0 for series in result for _, v in series["values"]), expr


def _instant(stack: Stack, expr: str, by: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    return {
        tuple(series["metric"].get(label, "") for label in by): float(series["values"][-1][1])
        for series in query_range(stack.prometheus, expr, stack.end, stack.end, 1)
    }


def test_withheld_decisions_by_reason_are_what_the_controller_decided(stack: Stack) -> None:
    selector = f'namespace="{NAMESPACE}", service="{SERVICE}", action="Withhold"'
    found = _instant(stack, counted(OPERATOR_DECISIONS, selector, "5m", ("reason",)), ("reason",))
    expected = {
        (reason,): float(count)
        for (action, reason), count in stack.decisions.items()
        if action == "Withhold"
    }
    assert found == expected


def test_the_first_rollback_is_counted(stack: Stack) -> None:
    selector = f'namespace="{NAMESPACE}", service="{SERVICE}"'
    assert stack.decisions["Rollback", "RolloutFailed"] == 1  # its cooldown forbids a second
    assert _instant(stack, counted(OPERATOR_ROLLBACKS, selector, "5m"), ()) == {(): 1.0}
    # The operator exports the counter at 0 before the first event, so increase() (the alert
    # rules) sees it too; it extrapolates a little past the samples, never below them.
    plain = f"sum(increase({OPERATOR_ROLLBACKS}{{{selector}}}[5m]))"
    (value,) = _instant(stack, plain, ()).values()
    assert 1.0 <= value < 1.5


def test_recording_rules_return_data(prometheus: httpx.Client, end: float) -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                result = query_range(prometheus, rule["record"], end - 10, end, 1)
                assert _has_data(result), rule["record"]


def test_overview_preview_is_drawn_from_prometheus(prometheus: httpx.Client, end: float) -> None:
    model = _models()["specops-overview.json"]
    panels = fetch_panels(prometheus, model, VARIABLES, end - LOAD_SECONDS, end, 1)
    empty = [p.title for p in panels if not p.series]
    assert set(empty) <= CANARY_PANELS, empty
    render_preview(panels, f"{model['title']}: {NAMESPACE}/{SERVICE}", PREVIEW)
    assert PREVIEW.read_bytes().startswith(b"\x89PNG")
