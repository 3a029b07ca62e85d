"""Pods that do something: `specops podrunner` runs each kwok pod of a rendered Deployment as
the simulated engine with the pod's own arguments, Prometheus scrapes it with the pod's
labels, a rollout replaces the processes, and deleting the Deployment stops them. A pod is
Ready only while its engine answers, so a rolling update never leaves the service without
an engine."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from specops_lab.cluster import ClusterInfo
from specops_lab.podrunner import STARTUP_DELAY_ANNOTATION, RunnerState, read_state

from e2e.harness import Wait, filled
from specops.api import parse_service
from specops.render import RenderOptions, plan

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llama.yaml"
_PR_SET_PDEATHSIG = 1
# Long enough that the pods are seen not Ready while their engines load.
_STARTUP_DELAY_S = 8
_COMPLETION = {"model": "llama-3.1-8b", "prompt": "hello", "max_tokens": 8}
# Longer (several seconds) than a kill 5 s after SIGTERM allows: the old engine must finish it.
_LONG_COMPLETION = {**_COMPLETION, "max_tokens": 4000, "ignore_eos": True}


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
    """The example's Deployment as the operator renders it. The client's create methods send
    a dict as it is, though their types name only the models (hence the arg-type ignores)."""
    document = yaml.safe_load(EXAMPLE.read_text())
    document["metadata"]["namespace"] = namespace
    objects = plan(parse_service(document), RenderOptions()).objects
    deployment: dict[str, Any] = next(o for o in objects if o["kind"] == "Deployment")
    return deployment


def _speculative_config(deployment: dict[str, Any]) -> str:
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("--speculative-config") + 1]


def _with_speculative_config(deployment: dict[str, Any], speculative_config: str) -> dict[str, Any]:
    """A patch that rolls ``deployment`` to ``speculative_config``, as the operator does."""
    args = list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    args[args.index("--speculative-config") + 1] = speculative_config
    return {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": args}]}}}}


def _one_token_config(speculative_config: str) -> str:
    rolled = {**json.loads(speculative_config), "num_speculative_tokens": 1}
    rolled.pop("num_speculative_tokens_per_batch_size")
    return json.dumps(rolled, separators=(",", ":"))


def _api_pods(core: client.CoreV1Api, namespace: str) -> dict[str, client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector="specops.io/service=llama")
    return {
        filled(filled(p.metadata).name): p
        for p in pods.items
        if filled(p.metadata).deletion_timestamp is None
    }


def _is_ready(pod: client.V1Pod) -> bool:
    conditions = filled(pod.status).conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _serving(runner: Runner, core: client.CoreV1Api, namespace: str, config: str) -> bool:
    """Every pod of the Deployment runs ``config`` and is ready, as the runner sees it."""
    pods = runner.state().service_pods(namespace, "llama")
    return (
        len(pods) == 2
        and all(p.ready and p.speculative_config == config for p in pods)
        and {p.pod for p in pods} == set(_api_pods(core, namespace))
    )


def _answers(engine_url: str) -> bool:
    try:
        return httpx.get(f"{engine_url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


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
    apps.create_namespaced_deployment(namespace, deployment)  # type: ignore[arg-type]
    wait(lambda: _serving(runner, core, namespace, config), "an engine and a sidecar per pod")
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
    completion = httpx.post(f"{proxy}/v1/completions", json=_COMPLETION, timeout=60).json()
    assert completion["usage"]["completion_tokens"] == 8

    # A rollout (as the operator makes when it changes k) replaces every pod's processes.
    new_config = _one_token_config(config)
    apps.patch_namespaced_deployment(
        "llama", namespace, _with_speculative_config(deployment, new_config)
    )
    wait(
        lambda: _serving(runner, core, namespace, new_config),
        "the rolled pods to run the new speculative config",
    )
    old_pids = [pid for pod in first for pid in pod.pids.values()]
    wait(lambda: all(_gone(pid) for pid in old_pids), "the replaced pods' processes to stop")

    last = runner.state().service_pods(namespace, "llama")
    apps.delete_namespaced_deployment("llama", namespace)
    wait(lambda: not runner.state().service_pods(namespace, "llama"), "the pods to go")
    # Their processes stop after the preStop sleep, within the grace period.
    wait(lambda: all(_gone(pid) for pod in last for pid in pod.pids.values()), "them to stop")
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


def test_pods_are_ready_only_while_their_engine_answers(
    api_client: client.ApiClient, namespace: str, runner: Runner, wait: Wait
) -> None:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    deployment = _deployment(namespace)
    template = deployment["spec"]["template"]["metadata"]
    template.setdefault("annotations", {})[STARTUP_DELAY_ANNOTATION] = str(_STARTUP_DELAY_S)
    apps.create_namespaced_deployment(namespace, deployment)  # type: ignore[arg-type]
    loading: set[str] = set()

    def all_ready_and_none_early() -> bool:
        # The API is read first: a pod Ready there must have an engine that answers now.
        pods = _api_pods(core, namespace)
        engines = {p.pod: p.engine_url for p in runner.state().service_pods(namespace, "llama")}
        for name, pod in pods.items():
            answers = name in engines and _answers(engines[name])
            assert answers or not _is_ready(pod), f"{name} is Ready before its engine answers"
            if name in engines and filled(pod.status).phase == "Running" and not answers:
                loading.add(name)
        return len(pods) == 2 and all(_is_ready(p) for p in pods.values())

    wait(all_ready_and_none_early, "both pods Ready once their engines answer")
    assert loading == set(_api_pods(core, namespace)), "each pod was seen loading, not Ready"

    # An engine that dies takes its pod out of Ready until it is restarted and loaded.
    (victim, *_) = runner.state().service_pods(namespace, "llama")
    os.kill(victim.pids["vllm"], signal.SIGKILL)
    wait(lambda: not _is_ready(_api_pods(core, namespace)[victim.pod]), "the pod not Ready")
    wait(lambda: _is_ready(_api_pods(core, namespace)[victim.pod]), "the restarted pod Ready")
    restarted = {p.pod: p.restarts for p in runner.state().service_pods(namespace, "llama")}
    assert restarted[victim.pod] == 1

    # A rolling update under load: the service always has an engine behind its proxy, and
    # an old pod finishes the requests it is serving before its engine exits.
    proxy = runner.state().service_url(namespace, "llama")
    assert proxy is not None
    statuses: Counter[int | str] = Counter()
    done = threading.Event()

    def send() -> None:
        with httpx.Client(timeout=60) as http:
            while not done.is_set():
                try:
                    response = http.post(f"{proxy}/v1/completions", json=_LONG_COMPLETION)
                except httpx.HTTPError as exc:
                    statuses[type(exc).__name__] += 1
                else:
                    statuses[response.status_code] += 1

    senders = [threading.Thread(target=send) for _ in range(2)]
    for sender in senders:
        sender.start()
    try:
        old_pids = [
            pid for p in runner.state().service_pods(namespace, "llama") for pid in p.pids.values()
        ]
        new_config = _one_token_config(_speculative_config(deployment))
        apps.patch_namespaced_deployment(
            "llama", namespace, _with_speculative_config(deployment, new_config)
        )
        wait(lambda: _serving(runner, core, namespace, new_config), "the rollout")
        wait(lambda: all(_gone(pid) for pid in old_pids), "the old pods' processes to stop")
    finally:
        done.set()
        for sender in senders:
            sender.join()
    assert set(statuses) == {200}, f"responses during the rollout: {dict(statuses)}"


def test_stopping_the_runner_stops_every_process(
    api_client: client.ApiClient, namespace: str, runner: Runner, wait: Wait
) -> None:
    deployment = {**_deployment(namespace)}
    deployment["spec"] = {**deployment["spec"], "replicas": 1}
    client.AppsV1Api(api_client).create_namespaced_deployment(namespace, deployment)  # type: ignore[arg-type]
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
