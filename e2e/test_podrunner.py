"""Pods that do something: `specops podrunner` runs each kwok pod of a rendered Deployment as
the simulated engine with the pod's own arguments, Prometheus scrapes it with the pod's
labels, a rollout replaces the processes, and deleting the Deployment stops them."""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from harness import Wait
from kubernetes import client

from specops.api import parse_service
from specops.cluster import ClusterInfo
from specops.podrunner import RunnerState, read_state
from specops.render import RenderOptions, plan

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llama.yaml"
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Runner:
    process: subprocess.Popen[bytes]
    work_dir: Path

    def state(self) -> RunnerState:
        state_file = self.work_dir / "state.json"
        return read_state(state_file) if state_file.exists() else RunnerState()

    def log(self) -> str:
        return (self.work_dir / "runner.log").read_text(errors="replace")


def _term_with_pytest() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@pytest.fixture
def runner(cluster: ClusterInfo, tmp_path: Path, wait: Wait) -> Iterator[Runner]:
    """`specops podrunner` with Prometheus, stopped with SIGTERM (as Ctrl-C) afterwards."""
    work_dir = tmp_path / "podrunner"
    work_dir.mkdir()
    specops = Path(sys.executable).with_name("specops")
    argv = [
        str(specops),
        "podrunner",
        f"--kubeconfig={cluster.kubeconfig}",
        f"--work-dir={work_dir}",
        "--prometheus",
        "--scrape-interval=1",
        "--poll-interval=0.5",
    ]
    with (work_dir / "runner.log").open("wb") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_term_with_pytest
        )
    started = Runner(process, work_dir)
    try:
        wait(
            lambda: started.state().prometheus_url is not None or process.poll() is not None,
            "the pod runner and its Prometheus",
        )
        assert process.poll() is None, started.log()
        yield started
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _deployment(namespace: str) -> dict[str, Any]:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["metadata"]["namespace"] = namespace
    objects = plan(parse_service(document), RenderOptions()).objects
    deployment: dict[str, Any] = next(o for o in objects if o["kind"] == "Deployment")
    return deployment


def _speculative_config(deployment: dict[str, Any]) -> str:
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("--speculative-config") + 1]


def _cmdline(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def _series(prometheus: str, query: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": query}, timeout=10)
    result: list[dict[str, Any]] = answer.json()["data"]["result"]
    return result


def test_pods_run_their_own_args_are_scraped_roll_and_stop(
    api_client: client.ApiClient, namespace: str, runner: Runner, wait: Wait
) -> None:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    deployment = _deployment(namespace)
    config = _speculative_config(deployment)
    apps.create_namespaced_deployment(namespace, deployment)

    def api_pods() -> set[str]:
        pods = core.list_namespaced_pod(namespace, label_selector="specops.io/service=llama")
        return {p.metadata.name for p in pods.items if p.metadata.deletion_timestamp is None}

    def running(speculative_config: str) -> bool:
        pods = runner.state().service_pods(namespace, "llama")
        return (
            len(pods) == 2
            and all(p.ready and p.speculative_config == speculative_config for p in pods)
            and {p.pod for p in pods} == api_pods()
        )

    wait(lambda: running(config), "an engine and a sidecar per pod, ready")
    first = runner.state().service_pods(namespace, "llama")
    for pod in first:
        engine = _cmdline(pod.pids["vllm"])
        assert engine[engine.index("--speculative-config") + 1] == config
        sidecar = _cmdline(pod.pids["specops-sidecar"])
        assert sidecar[sidecar.index("--pod") + 1] == pod.pod
        assert sidecar[sidecar.index("--engine-url") + 1] == pod.engine_url

    prometheus = runner.state().prometheus_url
    assert prometheus is not None
    pod_names = {p.pod for p in first}

    def scraped(metric: str, container: str) -> bool:
        series = _series(prometheus, f'{metric}{{namespace="{namespace}",service="llama"}}')
        return {s["metric"]["pod"] for s in series if s["metric"]["container"] == container} == (
            pod_names
        )

    wait(lambda: scraped("vllm:num_requests_running", "vllm"), "engine metrics with pod labels")
    wait(lambda: scraped("up", "specops-sidecar"), "sidecar targets with pod labels")

    proxy = runner.state().service_url(namespace, "llama")
    assert proxy is not None
    body = {"model": "llama-3.1-8b", "prompt": "hello", "max_tokens": 8}
    completion = httpx.post(f"{proxy}/v1/completions", json=body, timeout=60).json()
    assert completion["usage"]["completion_tokens"] == 8

    # A rollout (as the operator makes when it changes k) replaces every pod's processes.
    rolled = {**json.loads(config), "num_speculative_tokens": 1}
    rolled.pop("num_speculative_tokens_per_batch_size")
    new_config = json.dumps(rolled, separators=(",", ":"))
    containers = deployment["spec"]["template"]["spec"]["containers"]
    args = list(containers[0]["args"])
    args[args.index("--speculative-config") + 1] = new_config
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": args}]}}}}
    apps.patch_namespaced_deployment("llama", namespace, patch)
    wait(lambda: running(new_config), "the rolled pods to run the new speculative config")
    old_pids = [pid for pod in first for pid in pod.pids.values()]
    wait(lambda: all(_gone(pid) for pid in old_pids), "the replaced pods' processes to stop")

    last = runner.state().service_pods(namespace, "llama")
    apps.delete_namespaced_deployment("llama", namespace)
    wait(lambda: not runner.state().service_pods(namespace, "llama"), "the pods to be stopped")
    assert all(_gone(pid) for pod in last for pid in pod.pids.values())
    wait(
        lambda: (
            not any(
                target["labels"]["namespace"] == namespace
                for target in json.loads(
                    (runner.work_dir / "prometheus" / "targets.json").read_text()
                )
            )
        ),
        "the targets to be withdrawn",
    )


def test_stopping_the_runner_stops_every_process(
    api_client: client.ApiClient, namespace: str, runner: Runner, wait: Wait
) -> None:
    deployment = {**_deployment(namespace)}
    deployment["spec"] = {**deployment["spec"], "replicas": 1}
    client.AppsV1Api(api_client).create_namespaced_deployment(namespace, deployment)
    wait(
        lambda: any(p.ready for p in runner.state().service_pods(namespace, "llama")),
        "a running pod",
    )
    (pod,) = runner.state().service_pods(namespace, "llama")
    prometheus_pid = _prometheus_pid(runner.work_dir)
    runner.process.send_signal(signal.SIGINT)
    assert runner.process.wait(timeout=60) == 0, runner.log()
    assert all(_gone(pid) for pid in (*pod.pids.values(), prometheus_pid))


def _prometheus_pid(work_dir: Path) -> int:
    config = f"--config.file={work_dir / 'prometheus' / 'prometheus.yml'}"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if config in _cmdline(int(entry.name)):
                    return int(entry.name)
            except OSError:
                continue
    pytest.fail("no Prometheus process with the runner's config")
