"""``specops advise`` end to end: two simulated vLLM engines that no SpeculativeService owns,
a real Prometheus scraping them under labels a KServe pod would carry, load on both, and
the command run as a user would run it."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
from specops_lab.launch import specops_executable

from specops.vllm import SpeculativeConfig
from tests.processes import running_prometheus, running_sim_engine

pytestmark = pytest.mark.integration

EAGLE3 = (
    '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
    '"num_speculative_tokens": 3, "draft_tensor_parallel_size": 1}'
)
LOAD_S = 75.0
WINDOW_S = 45.0


def _accepted_share(engines: list[str]) -> list[float]:
    """a_i from the engines' own pages: accepted at position i over all drafts."""
    drafts, accepted = 0.0, [0.0, 0.0, 0.0]
    for url in engines:
        for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
            if line.startswith("vllm:spec_decode_num_drafts_total{"):
                drafts += float(line.rsplit(" ", 1)[1])
            elif line.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total{"):
                position = int(line.split('position="')[1].split('"')[0])
                accepted[position] += float(line.rsplit(" ", 1)[1])
    return [a / drafts for a in accepted]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """Prometheus URL and the engines, with load running on both for LOAD_S seconds."""
    work = tmp_path_factory.mktemp("advise")
    with ExitStack() as stack:
        engines = [
            stack.enter_context(
                running_sim_engine(
                    [
                        "llama",
                        "--workload",
                        "gsm8k",
                        "--speculative-config",
                        EAGLE3,
                        "--seed",
                        str(i),
                    ],
                    work / f"engine-{i}.log",
                )
            )
            for i in range(2)
        ]
        job = {
            "job_name": "kserve-llama",
            "static_configs": [
                {
                    "targets": [url.removeprefix("http://")],
                    "labels": {"namespace": "ml", "pod": f"llama-predictor-{i}"},
                }
                for i, url in enumerate(engines)
            ],
        }
        prometheus = stack.enter_context(running_prometheus([job], work))
        loads = [
            subprocess.Popen(
                [
                    specops_executable(),
                    "load",
                    "--url",
                    url,
                    "--model",
                    "llama",
                    "--concurrency",
                    "12",
                    "--duration",
                    str(LOAD_S),
                    "--max-tokens",
                    "256",
                ],
                stdout=subprocess.DEVNULL,
                stderr=(work / f"load-{i}.log").open("w"),
            )
            for i, url in enumerate(engines)
        ]
        for load in loads:
            stack.callback(load.kill)
        time.sleep(WINDOW_S + 10)
        yield prometheus, engines


POD_MATCHERS = ("--match", "namespace=ml", "--match", "pod=~llama-predictor-.*")


def _advise(
    prometheus: str, *extra: str, matchers: tuple[str, ...] = POD_MATCHERS
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            specops_executable(),
            "advise",
            "--prometheus-url",
            prometheus,
            *matchers,
            "--window",
            str(WINDOW_S),
            "--profile",
            "llama3.1-8b-h100",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_advice_states_what_the_engines_counted_and_what_to_run(
    deployment: tuple[str, list[str]],
) -> None:
    prometheus, engines = deployment
    done = _advise(prometheus, "--speculative-config", EAGLE3, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    advice = json.loads(done.stdout)
    assert advice["measured"] and advice["engines"] == 2
    in_force = advice["in_force"]
    assert (in_force["speculating"], in_force["num_speculative_tokens"]) == (True, 3)
    assert in_force["method"] == "eagle3"
    assert in_force["drafted_tokens_per_draft"] == pytest.approx(3.0, abs=0.01)
    # The acceptance the engines counted (whole lifetime; the window is most of it).
    assert advice["acceptance_per_position"] == pytest.approx(_accepted_share(engines), abs=0.05)
    assert advice["drafts"] > 2000 and 5 <= advice["running_requests"]["mean"] <= 13
    assert advice["step_time_source"].startswith("measured: ")
    # The KV pool each engine sized reached Prometheus as vllm:cache_config_info's labels.
    assert advice["context_source"].endswith("of the engines' pools")
    assert 100 < advice["context_tokens"] < 4096
    assert [c["k"] for c in advice["crossovers"]] == list(range(1, 8))
    recommendation = advice["recommendation"]
    assert recommendation is not None
    if not recommendation["change"]:
        assert recommendation["num_speculative_tokens"] == 3
    assert isinstance(recommendation["predicted_gain"], float)
    run = recommendation["speculative_config"]
    if recommendation["num_speculative_tokens"] == 0:
        assert run is None
    else:
        chosen = json.loads(run)
        # The user's own keys stay; only k (and a table) are chosen.
        assert chosen["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
        assert chosen["draft_tensor_parallel_size"] == 1
        assert chosen["num_speculative_tokens"] == recommendation["num_speculative_tokens"]
        SpeculativeConfig.from_json(run)


def test_advice_as_text_and_its_refusals(deployment: tuple[str, list[str]]) -> None:
    prometheus, _ = deployment
    done = _advise(prometheus)
    assert done.returncode == 0, done.stderr + done.stdout
    text = done.stdout
    assert "In force (from the engines' counters): eagle3, num_speculative_tokens=3" in text
    assert "Crossover batch per k" in text and "Recommended: " in text
    assert "over the config in force at the mean" in text or "AlreadyBest: " in text
    wrong = _advise(prometheus, "--speculative-config", EAGLE3.replace('": 3', '": 5'))
    assert wrong.returncode == 2
    assert "the engines count 3 draft positions" in wrong.stderr
    nothing = _advise(prometheus, matchers=("--match", "namespace=elsewhere"))
    assert nothing.returncode != 0
    assert "no series in Prometheus" in nothing.stderr + nothing.stdout
