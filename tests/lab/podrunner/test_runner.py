"""The runner's shell with a list of pods standing in for the API server: real processes,
a real Prometheus, the proxy in front of them."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from specops_lab.cluster import ENGINE_READY_ANNOTATION
from specops_lab.podrunner import (
    ENGINE_DEFAULT_PORT,
    FailedPod,
    PodKey,
    PodRunner,
    PodRunnerError,
    RunnerOptions,
    RunnerState,
    read_state,
)

from tests.lab.podrunner.pods import llama_deployment, pod_of

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not shutil.which("prometheus"), reason="needs Debian's prometheus"),
]

WAIT_S = 60.0


class ListSource:
    """Pods from a list the test edits; ``failing`` makes listing fail like a lost API server.
    Readiness marks land on the listed pods' annotations, as on the API server's."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.failing = False
        self.marks: list[tuple[str, bool]] = []
        self.released: list[str] = []

    def pods(self) -> Sequence[Mapping[str, Any]]:
        if self.failing:
            raise PodRunnerError("cannot list pods: connection refused")
        return list(self.items)

    def nodes(self) -> frozenset[str]:
        return frozenset({"kwok-gpu-0"})

    def mark_engine_ready(self, key: PodKey, ready: bool) -> None:
        (item,) = (i for i in self.items if i["metadata"]["uid"] == key.uid)
        item["metadata"]["annotations"][ENGINE_READY_ANNOTATION] = "true" if ready else "false"
        self.marks.append((key.name, ready))

    def release_pod(self, key: PodKey) -> None:
        self.items = [i for i in self.items if i["metadata"]["uid"] != key.uid]
        self.released.append(key.name)


async def _until(done: Callable[[], bool], what: str) -> None:
    for _ in range(int(WAIT_S / 0.1)):
        if done():
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"timed out after {WAIT_S:.0f} s waiting for {what}")


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


class Harness:
    def __init__(self, source: ListSource, options: RunnerOptions) -> None:
        self.source = source
        self.options = options

    def state(self) -> RunnerState:
        if not self.options.state_file.exists():
            return RunnerState()
        return read_state(self.options.state_file)

    def ready(self, count: int) -> bool:
        pods = self.state().pods
        return len(pods) == count and all(p.ready for p in pods)


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    source = ListSource()
    options = RunnerOptions(
        work_dir=tmp_path / "runner",
        poll_interval_s=0.2,
        prometheus_binary="prometheus",
        scrape_interval_s=0.5,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(PodRunner(source, options).run(stop))
    try:
        await _until(lambda: options.state_file.exists() or task.done(), "the first state file")
        yield Harness(source, options)
    finally:
        stop.set()
        await task


async def test_pods_run_are_scraped_are_proxied_restart_and_stop(harness: Harness) -> None:
    deployment = llama_deployment("ns")
    harness.source.items = [pod_of(deployment, "llama-a", uid="a")]
    await _until(lambda: harness.ready(1), "one ready pod")
    # Claimed at once (its engine not yet answering), then ready.
    marks = [("llama-a", False), ("llama-a", True)]
    await _until(lambda: harness.source.marks == marks, "the pod claimed, then marked ready")
    state = harness.state()
    (pod,) = state.pods
    written = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert pod.speculative_config == written[written.index("--speculative-config") + 1]
    assert pod.speculative_config is not None
    cmdline = Path(f"/proc/{pod.pids['vllm']}/cmdline").read_bytes().split(b"\0")
    assert pod.speculative_config.encode() in cmdline

    url = state.service_url("ns", "llama")
    assert url is not None
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        models = (await client.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["llama-3.1-8b"]
        body = {"model": "llama-3.1-8b", "prompt": "hi", "max_tokens": 4, "stream": True}
        async with client.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            lines = [line async for line in response.aiter_lines() if line]
        assert lines[-1] == "data: [DONE]"

    assert state.prometheus_url is not None
    query = 'up{namespace="ns",pod="llama-a",service="llama"}'

    def scraped() -> set[str]:
        answer = httpx.get(f"{state.prometheus_url}/api/v1/query", params={"query": query})
        result = answer.json()["data"]["result"]
        return {r["metric"]["container"] for r in result if r["value"][1] == "1"}

    await _until(lambda: scraped() == {"vllm", "specops-sidecar"}, "both targets up")

    harness.source.failing = True
    await asyncio.sleep(1.0)
    assert [p.pod for p in harness.state().pods] == ["llama-a"]
    harness.source.failing = False

    os.kill(pod.pids["vllm"], signal.SIGKILL)
    await _until(lambda: harness.state().pods[0].restarts == 1, "a restart")
    await _until(lambda: harness.ready(1), "the restarted pod to be ready")
    marks += [("llama-a", False), ("llama-a", True)]
    await _until(lambda: harness.source.marks == marks, "not ready while dead, then ready")
    restarted = harness.state().pods[0]
    assert restarted.engine_url == pod.engine_url

    harness.source.items = []
    # Gone from the pods at once, its processes stop after the pod's preStop sleep.
    await _until(lambda: not harness.state().pods, "the pod to go")
    assert json.loads(harness.options.file_sd.read_text()) == []
    await _until(lambda: not harness.state().stopping, "the pod's processes to stop")
    assert not any(_alive(pid) for pid in restarted.pids.values())
    await _until(lambda: not harness.state().services, "the service's proxy to close")


async def _stream(url: str, tokens: int) -> list[dict[str, Any]]:
    """A streamed completion of exactly ``tokens`` tokens through ``url``; its chunks."""
    body = {
        "model": "llama-3.1-8b",
        "prompt": "count",
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with (
        httpx.AsyncClient(base_url=url, timeout=120.0) as client,
        client.stream("POST", "/v1/completions", json=body) as response,
    ):
        assert response.status_code == 200
        events = [line.removeprefix("data: ") async for line in response.aiter_lines() if line]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


async def test_a_replaced_pod_finishes_the_request_it_serves_while_its_successor_starts(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="specops_lab.podrunner")
    deployment = llama_deployment("ns")
    harness.source.items = [pod_of(deployment, "llama-old", uid="old")]
    await _until(lambda: harness.ready(1), "the old pod to be ready")
    (old,) = harness.state().pods
    url = harness.state().service_url("ns", "llama")
    assert url is not None
    stream = asyncio.create_task(_stream(url, tokens=6000))
    await _until(lambda: _generated(old.engine_url) > 0, "the request to be running")

    # The rollout: the old pod goes, a new one comes; the runner's loop keeps going while
    # the old engine drains, so the new pod is probed and marked ready meanwhile.
    harness.source.items = [pod_of(deployment, "llama-new", uid="new", ip="127.200.0.2")]
    await _until(lambda: [p.pod for p in harness.state().stopping] == ["llama-old"], "a drain")
    await _until(lambda: harness.ready(1) and not stream.done(), "the new pod, ready first")
    assert harness.state().pods[0].pod == "llama-new"
    assert _alive(old.pids["vllm"])

    chunks = await stream
    assert chunks[-1]["usage"]["completion_tokens"] == 6000
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    await _until(lambda: not harness.state().stopping, "the old pod's processes to stop")
    stopped = [r.getMessage() for r in caplog.records if "ns/llama-old: stopped" in r.getMessage()]
    assert len(stopped) == 1
    assert "'vllm': 0" in stopped[0]


async def test_a_deleted_pod_is_released_once_stopped_and_its_address_then_serves_its_successor(
    harness: Harness,
) -> None:
    deployment = llama_deployment("ns")
    harness.source.items = [pod_of(deployment, "llama-old", uid="old")]
    await _until(lambda: harness.ready(1), "the old pod to be ready")
    (old,) = harness.state().pods
    assert old.engine_url == "http://127.200.0.1:8000"
    assert old.sidecar_url == "http://127.200.0.1:9090"

    # Deleted: Terminating, as the API server leaves it for the kubelet. A successor that got
    # the same address (an IP is handed out again once free) and one still without an IP.
    terminating = harness.source.items[0]
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    successor = pod_of(deployment, "llama-next", uid="next")
    unaddressed = pod_of(deployment, "llama-later", uid="later", ip=None)
    harness.source.items = [terminating, successor, unaddressed]
    await _until(lambda: [p.pod for p in harness.state().stopping] == ["llama-old"], "a drain")
    # Both claimed at once (not ready), neither started while the old pod's processes live.
    await _until(
        lambda: {("llama-next", False), ("llama-later", False)} <= set(harness.source.marks),
        "the waiting pods claimed",
    )
    assert not harness.state().pods
    assert harness.source.released == []

    await _until(lambda: harness.source.released == ["llama-old"], "the old pod released")
    assert not any(_alive(pid) for pid in old.pids.values())
    await _until(lambda: harness.ready(1), "the successor to be ready")
    (pod,) = harness.state().pods
    assert (pod.pod, pod.engine_url) == ("llama-next", "http://127.200.0.1:8000")

    unaddressed["status"]["podIP"] = "127.200.0.2"
    await _until(lambda: harness.ready(2), "the later pod, once addressed, to be ready")


def _generated(engine_url: str) -> float:
    """The engine's generation_tokens counter."""
    page = httpx.get(f"{engine_url}/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith("vllm:generation_tokens_total")
    )


async def test_a_pod_the_runner_cannot_translate_is_reported(harness: Harness) -> None:
    # Marked ready by an earlier run of the runner: a pod that cannot run is not ready.
    annotations = {ENGINE_READY_ANNOTATION: "true"}
    pod = pod_of(llama_deployment("ns"), "odd", uid="odd", annotations=annotations)
    pod["spec"]["containers"][0].update(command=["python"], args=["app.py"], image="busybox")
    harness.source.items = [pod]
    await _until(lambda: bool(harness.state().failed), "the pod to be reported")
    (failed,) = harness.state().failed
    assert (failed.pod, failed.uid) == ("odd", "odd")
    assert "vllm serve" in failed.error
    assert not harness.state().pods
    await _until(lambda: harness.source.marks == [("odd", False)], "the pod marked not ready")


async def _first_failure(source: ListSource, options: RunnerOptions) -> FailedPod:
    """Run the runner until it reports a pod it cannot run; that report."""
    stop = asyncio.Event()
    task = asyncio.create_task(PodRunner(source, options).run(stop))
    try:
        await _until(lambda: bool(Harness(source, options).state().failed), "a failure")
    finally:
        stop.set()
        await task
    (failed,) = read_state(options.state_file).failed
    return failed


async def test_a_pod_whose_processes_cannot_start_is_reported(tmp_path: Path) -> None:
    source = ListSource()
    source.items = [pod_of(llama_deployment("ns"), "p", uid="p")]
    options = RunnerOptions(
        work_dir=tmp_path, poll_interval_s=0.1, specops_command=(str(tmp_path / "missing"),)
    )
    failed = await _first_failure(source, options)
    assert "cannot start" in failed.error
    assert str(tmp_path / "missing") in failed.error


async def test_a_pod_whose_address_another_process_listens_on_is_refused(tmp_path: Path) -> None:
    # Another cluster's engine on the same pod address would answer this pod's probes.
    source = ListSource()
    source.items = [pod_of(llama_deployment("ns"), "p", uid="p", ip="127.200.0.9")]
    options = RunnerOptions(work_dir=tmp_path, poll_interval_s=0.1)
    with socket.create_server(("127.200.0.9", ENGINE_DEFAULT_PORT)):
        failed = await _first_failure(source, options)
    assert f"127.200.0.9:{ENGINE_DEFAULT_PORT} is taken by a process" in failed.error
    assert not read_state(options.state_file).pods
    assert source.marks == [("p", False)]
