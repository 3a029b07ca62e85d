"""Every panel's PromQL returns data from a real Prometheus scraping the simulated engine and
the sidecar under load; the recording rules do too; the overview is drawn into a PNG.

Prometheus scrapes every second and labels the engine target the way the PodMonitor does
(namespace, service, pod); the sidecar's series carry those labels themselves.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from specops.dashboards import (
    fetch_panels,
    iter_panels,
    query_range,
    render_dashboards,
    render_preview,
    substitute,
)

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
}
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_http(url: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


async def _drive_load(engine: str, seconds: float, concurrency: int) -> int:
    """Closed-loop clients until ``seconds`` pass; returns completed requests."""
    done = 0
    deadline = time.monotonic() + seconds

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            response = await http.post(
                "/v1/completions",
                json={"model": SERVICE, "prompt": "Speculate, please.", "max_tokens": 96},
            )
            response.raise_for_status()
            done += 1

    async with httpx.AsyncClient(base_url=engine, timeout=60) as http:
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
    return done


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """Engine, sidecar and Prometheus running, with ``LOAD_SECONDS`` of load scraped."""
    work = tmp_path_factory.mktemp("stack")
    engine_port, sidecar_port, prometheus_port = _free_port(), _free_port(), _free_port()
    specops = [str(Path(sys.executable).with_name("specops"))]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        engine = _start(
            [
                *specops, "sim", "serve", "--host", "127.0.0.1", "--port", str(engine_port),
                "--model", SERVICE, "--speculative-config",
                json.dumps({"method": "eagle3", "model": "draft", "num_speculative_tokens": 3}),
            ],
            work / "engine.log",
        )  # fmt: skip
        processes.append(engine)
        _wait_http(f"http://127.0.0.1:{engine_port}/health", engine)
        sidecar = _start(
            [
                *specops, "sidecar", "--source", "direct",
                "--engine-url", f"http://127.0.0.1:{engine_port}",
                "--namespace", NAMESPACE, "--pod", POD, "--service", SERVICE,
                "--host", "127.0.0.1", "--port", str(sidecar_port),
                "--scrape-interval", "1", "--window", "10", "--window", "30",
                "--prediction-window", "10", "--profile", "llama3.1-8b-h100",
            ],
            work / "sidecar.log",
        )  # fmt: skip
        processes.append(sidecar)
        _wait_http(f"http://127.0.0.1:{sidecar_port}/healthz", sidecar)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {
                    "job_name": "engine",
                    "static_configs": [
                        {
                            "targets": [f"127.0.0.1:{engine_port}"],
                            "labels": {"namespace": NAMESPACE, "service": SERVICE, "pod": POD},
                        }
                    ],
                },
                {
                    "job_name": "sidecar",
                    "honor_labels": True,
                    "static_configs": [{"targets": [f"127.0.0.1:{sidecar_port}"]}],
                },
            ],
        }
        (work / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        server = _start(
            [
                PROMETHEUS, f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}",
            ],
            work / "prometheus.log",
        )  # fmt: skip
        processes.append(server)
        url = f"http://127.0.0.1:{prometheus_port}"
        _wait_http(f"{url}/-/ready", server)
        completed = asyncio.run(
            _drive_load(f"http://127.0.0.1:{engine_port}", LOAD_SECONDS, concurrency=8)
        )
        assert completed > 0
        time.sleep(3)  # the last scrapes and rule evaluations
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client
    finally:
        for process in reversed(processes):
            _stop(process)


def _models() -> dict[str, dict[str, Any]]:
    return {name: json.loads(text) for name, text in render_dashboards().items()}


def _targets() -> list[tuple[str, str, str]]:
    return [
        (name, panel["title"], target["expr"])
        for name, model in _models().items()
        for panel in iter_panels(model)
        for target in panel["targets"]
    ]


def _has_data(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(v)) for series in result for _, v in series["values"])


@pytest.mark.parametrize(("dashboard", "title", "expr"), _targets())
def test_panel_query_returns_data(
    prometheus: httpx.Client, dashboard: str, title: str, expr: str
) -> None:
    end = time.time()
    result = query_range(prometheus, substitute(expr, VARIABLES), end - 20, end, 1)
    assert _has_data(result), f"{dashboard} / {title}: no data for {expr}"


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
def test_annotation_queries_are_valid_promql(prometheus: httpx.Client, dashboard: str) -> None:
    end = time.time()
    for annotation in _models()[dashboard]["annotations"].get("list", []):
        query_range(prometheus, substitute(annotation["expr"], VARIABLES), end - 20, end, 1)


def test_recording_rules_return_data(prometheus: httpx.Client) -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    end = time.time()
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                result = query_range(prometheus, rule["record"], end - 10, end, 1)
                assert _has_data(result), rule["record"]


def test_overview_preview_is_drawn_from_prometheus(prometheus: httpx.Client) -> None:
    model = _models()["specops-overview.json"]
    end = time.time()
    panels = fetch_panels(prometheus, model, VARIABLES, end - LOAD_SECONDS, end, 1)
    assert all(panel.series for panel in panels), [p.title for p in panels if not p.series]
    render_preview(panels, f"{model['title']}: {NAMESPACE}/{SERVICE}", PREVIEW)
    assert PREVIEW.read_bytes().startswith(b"\x89PNG")
