"""A real Prometheus (Debian 2.42) scrapes a real `specops sim serve` process."""

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration

PROMETHEUS = "/usr/bin/prometheus"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for(url: str, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} never answered 200")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture
def engine_url() -> Iterator[str]:
    port = _free_port()
    specops = str(Path(sys.executable).parent / "specops")
    command = [specops, "sim", "serve", "llama", "--port", str(port)]
    command += ["--host", "127.0.0.1", "--workload", "gsm8k", "--speculative-config"]
    command += ['{"method": "eagle", "model": "d", "num_speculative_tokens": 3}']
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for(f"{url}/health")
        yield url
    finally:
        _stop(process)


@pytest.fixture
def prometheus_url(engine_url: str, tmp_path: Path) -> Iterator[str]:
    if not Path(PROMETHEUS).exists():
        pytest.fail(f"{PROMETHEUS} is missing: apt-get install prometheus")
    target = engine_url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: vllm\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = _free_port()
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for(f"{url}/-/ready")
        yield url
    finally:
        _stop(process)
        shutil.rmtree(tmp_path / "data", ignore_errors=True)


def test_prometheus_scrapes_every_vllm_series(engine_url: str, prometheus_url: str) -> None:
    for _ in range(3):
        response = httpx.post(
            f"{engine_url}/v1/completions",
            json={"model": "llama", "prompt": "hello", "max_tokens": 16},
            timeout=30.0,
        )
        assert response.status_code == 200
    wanted = [
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "vllm:iteration_tokens_total_count",
        "vllm:num_requests_running",
        "vllm:time_to_first_token_seconds_bucket",
    ]
    deadline = time.monotonic() + 30
    missing = wanted
    while missing and time.monotonic() < deadline:
        time.sleep(1.0)
        missing = [
            name
            for name in wanted
            if not httpx.get(f"{prometheus_url}/api/v1/query", params={"query": name}).json()[
                "data"
            ]["result"]
        ]
    assert not missing, f"Prometheus has no samples for {missing}"
    health = httpx.get(f"{prometheus_url}/api/v1/targets").json()["data"]["activeTargets"][0]
    assert health["health"] == "up", health["lastError"]
    drafts = httpx.get(
        f"{prometheus_url}/api/v1/query",
        params={"query": 'vllm:spec_decode_num_drafts_total{model_name="llama",engine="0"}'},
    ).json()["data"]["result"]
    assert float(drafts[0]["value"][1]) > 0
