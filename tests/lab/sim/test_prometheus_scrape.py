"""A real Prometheus (Debian 2.42) scrapes a real `specops sim serve` process."""

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.processes import running_prometheus, running_sim_engine

pytestmark = pytest.mark.integration

EAGLE = '{"method": "eagle", "model": "d", "num_speculative_tokens": 3}'


@pytest.fixture
def engine_url(tmp_path: Path) -> Iterator[str]:
    args = ["llama", "--workload", "gsm8k", "--speculative-config", EAGLE]
    with running_sim_engine(args, tmp_path / "engine.log") as url:
        yield url


@pytest.fixture
def prometheus_url(engine_url: str, tmp_path: Path) -> Iterator[str]:
    target = engine_url.removeprefix("http://")
    job = {"job_name": "vllm", "static_configs": [{"targets": [target]}]}
    with running_prometheus([job], tmp_path) as url:
        yield url


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
