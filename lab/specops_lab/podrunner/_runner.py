"""The runner's shell: poll the API server, start and stop processes, publish where they are.

kwok's pods run nothing. Every ``poll_interval_s`` the runner lists the pods labelled
``specops.io/service`` and the fake nodes, plans (``plan_actions``) and applies the plan:
each wanted pod gets its engine under the simulated engine and its sidecar, on the pod's
own IP (kwok gives pods loopback addresses) and its containers' ports, as on a real node;
a pod that goes away or is replaced (new uid) has its processes stopped. After each
pass it probes every engine's ``/health`` and sidecar's ``/healthz``, rewrites the file_sd
targets of the Prometheus it may have started, serves a round-robin proxy per service,
and writes the state file.

A pod that goes stops as on a real node, in the background while the loop runs on: it
leaves its service's proxy (its endpoints) at once, each container gets SIGTERM when its
preStop sleep ends and SIGKILL when the pod's terminationGracePeriodSeconds ends, so an
engine drains the requests it is serving while its successor loads and turns ready. The
pod stays Terminating meanwhile; once its processes have stopped the runner deletes it for
good, as the kubelet does, and only then may kwok give its IP to another pod.

Those probes are the pods' readiness probes: a pod is ready once all its processes
answer. The runner writes that to the pod as the ``specops.io/engine-ready`` annotation,
and kwok's stages for these pods turn it into the Ready condition, so a Deployment rolls
on only as fast as new engines load, as the kubelet's probes make it on a real node. The
same view picks the engines a service's proxy uses and is ``ready`` in the state file.

Every child runs in a session of its own and gets SIGTERM if the runner's thread dies
(``PR_SET_PDEATHSIG``); ``run`` stops them all on the way out, whatever the reason, those
still draining too.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from specops_lab.cluster import free_ports
from specops_lab.podrunner._errors import PodRunnerError
from specops_lab.podrunner._plan import (
    EXIT_STOP,
    ProbeState,
    Running,
    StopTimes,
    plan_actions,
    probed,
    readiness_marks,
    released_pods,
    startable_pods,
    stop_times,
    wanted_pods,
)
from specops_lab.podrunner._pods import Pod, PodKey, parse_pod
from specops_lab.podrunner._prometheus import file_sd_targets, prometheus_config
from specops_lab.podrunner._proxy import build_proxy_app
from specops_lab.podrunner._state import FailedPod, PodEndpoints, RunnerState, ServiceEndpoint
from specops_lab.podrunner._translate import (
    LOOPBACK,
    PodLaunch,
    ProcessSpec,
    SimOptions,
    launch_plan,
)

__all__ = ["PodRunner", "PodSource", "RunnerOptions", "default_specops_command"]

_log = logging.getLogger("specops_lab.podrunner")
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)
_EXIT_POLL_S = 0.1
_PROMETHEUS_START_S = 60.0


def default_specops_command() -> tuple[str, ...]:
    """This environment's ``specops`` (the console script next to the interpreter)."""
    script = Path(sys.executable).with_name("specops")
    return (str(script),) if script.exists() else (sys.executable, "-m", "specops.cli")


@dataclass(frozen=True)
class RunnerOptions:
    work_dir: Path
    sim: SimOptions = field(default_factory=SimOptions)
    poll_interval_s: float = 1.0
    prometheus_binary: str | None = None
    scrape_interval_s: float = 2.0
    proxies: bool = True
    specops_command: tuple[str, ...] = field(default_factory=default_specops_command)

    @property
    def state_file(self) -> Path:
        return self.work_dir / "state.json"

    @property
    def file_sd(self) -> Path:
        return self.work_dir / "prometheus" / "targets.json"


class PodSource(Protocol):
    """Where pods and nodes come from: the API server, or a list in a test."""

    def pods(self) -> Sequence[Mapping[str, Any]]:
        """The pods labelled ``specops.io/service``; raises PodRunnerError when unreachable."""
        ...

    def nodes(self) -> frozenset[str]:
        """The names of the fake nodes whose pods the runner runs."""
        ...

    def mark_engine_ready(self, key: PodKey, ready: bool) -> None:
        """Set the pod's ``specops.io/engine-ready`` annotation; raises PodRunnerError."""
        ...

    def release_pod(self, key: PodKey) -> None:
        """Delete a Terminating pod for good (its processes have stopped); raises
        PodRunnerError."""
        ...


def _term_with_parent() -> None:
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _spawn(argv: Sequence[str], log: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
            preexec_fn=_term_with_parent,
        )


def _refuse_taken(key: PodKey, process: ProcessSpec) -> None:
    """Refuse a pod whose address some process this runner did not start listens on: its
    probes and traffic would reach that process (another local cluster handing out the same
    pod addresses, or a leftover engine), and the pod would pass for ready."""
    family = socket.AF_INET6 if ":" in process.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((process.host, process.port))
        except OSError as exc:
            raise PodRunnerError(
                f"pod {key}: its {process.container} container's address {process.address}"
                f" is taken by a process this runner did not start ({exc.strerror}); stop it,"
                " or the other local cluster that hands out this address"
            ) from exc


async def _exited_within(process: subprocess.Popen[bytes], seconds: float) -> bool:
    """Whether ``process`` exits (and is reaped) within ``seconds``; polls, so that many
    draining processes hold no threads."""
    deadline = time.monotonic() + seconds
    while process.poll() is None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_EXIT_POLL_S)
    return True


async def _stop(process: subprocess.Popen[bytes], times: StopTimes) -> None:
    """SIGTERM at ``times.term_after_s``, SIGKILL at ``times.kill_after_s`` unless it has
    exited by then; reaps it."""
    if await _exited_within(process, times.term_after_s):
        return
    process.terminate()
    if await _exited_within(process, times.kill_after_s - times.term_after_s):
        return
    process.kill()
    await _exited_within(process, math.inf)


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class _PodProcesses:
    """The live side of one pod: its plan, its children, its health."""

    launch: PodLaunch
    children: dict[str, subprocess.Popen[bytes]]
    restarts: int = 0
    exited_at: float | None = None
    probes: dict[str, ProbeState] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        """Every container's readiness probe says Ready."""
        return all(self.probes.get(p.container, ProbeState()).ready for p in self.launch.processes)

    def running(self) -> Running:
        alive = all(child.poll() is None for child in self.children.values())
        return Running(alive=alive, exited_at=self.exited_at, restarts=self.restarts)


@dataclass
class _Proxy:
    runner: web.AppRunner
    url: str


def _endpoints(held: _PodProcesses) -> PodEndpoints:
    launch = held.launch
    return PodEndpoints(
        namespace=launch.key.namespace,
        pod=launch.key.name,
        uid=launch.key.uid,
        service=launch.service,
        node=launch.node,
        engine_url=launch.engine.url,
        sidecar_url=launch.sidecar.url if launch.sidecar else None,
        speculative_config=launch.speculative_config,
        ready=held.ready,
        restarts=held.restarts,
        pids={name: child.pid for name, child in held.children.items()},
    )


class PodRunner:
    """Runs the pods of a :class:`PodSource` as local processes until told to stop."""

    def __init__(self, source: PodSource, options: RunnerOptions) -> None:
        self.source = source
        self.options = options
        self._pods: dict[PodKey, _PodProcesses] = {}
        self._stopping: dict[PodKey, tuple[_PodProcesses, asyncio.Task[None]]] = {}
        self._failed: dict[PodKey, str] = {}
        self._proxies: dict[tuple[str, str], _Proxy] = {}
        self._prometheus_url: str | None = None
        self._proxy_session: aiohttp.ClientSession | None = None
        self._written: dict[Path, str] = {}

    # -- the loop ------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Reconcile every ``poll_interval_s`` until ``stop`` is set; then stop every child."""
        self.options.work_dir.mkdir(parents=True, exist_ok=True)
        async with AsyncExitStack() as stack:
            session = await stack.enter_async_context(
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=5.0))
            )
            # The proxies' own session: a Service limits no connections, and aiohttp's
            # default pool holds 100 (the engines would see at most 100 requests, and the
            # probes would queue behind them).
            self._proxy_session = await stack.enter_async_context(
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=0),
                    timeout=aiohttp.ClientTimeout(total=None, connect=5.0),
                )
            )
            stack.push_async_callback(self._stop_everything)
            self._write_targets()
            if self.options.prometheus_binary is not None:
                self._prometheus_url = await stack.enter_async_context(
                    self._prometheus(self.options.prometheus_binary, session)
                )
            while not stop.is_set():
                await self.reconcile(session)
                with suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.options.poll_interval_s)

    async def reconcile(self, session: aiohttp.ClientSession) -> None:
        """One pass: read the pods, apply the plan, probe, publish."""
        try:
            listed = await asyncio.to_thread(self.source.pods)
            nodes = await asyncio.to_thread(self.source.nodes)
        except PodRunnerError as exc:
            _log.warning("cannot list pods (keeping what runs): %s", exc)
            return
        pods = [pod for obj in listed if (pod := self._parse(obj)) is not None]
        claimed = {
            k: p
            for k, p in wanted_pods(pods, nodes).items()
            if k not in self._failed and k not in self._stopping
        }
        busy = {h.launch.engine.host for h in (*self._pods.values(), *self._held_stopping())}
        wanted = startable_pods(claimed, self._pods, busy)
        running = {key: held.running() for key, held in self._pods.items()}
        now = time.monotonic()
        self._note_exits(running, now)
        actions = plan_actions(wanted, running, now)
        for key in actions.stop:
            self._begin_stop(self._pods.pop(key))
        for key in actions.restart:
            self._restart_pod(self._pods[key])
        for key in actions.start:
            self._start_pod(wanted[key])
        listed_keys = {pod.key for pod in pods}
        self._failed = {k: e for k, e in self._failed.items() if k in listed_keys}
        await self._sync_proxies(session)
        await self._probe(session)
        await self._mark_readiness(pods, claimed)
        await self._release(pods, nodes)
        self._write_targets()
        self._write_state()

    # -- pods ----------------------------------------------------------------------
    def _parse(self, obj: Mapping[str, Any]) -> Pod | None:
        try:
            return parse_pod(obj)
        except PodRunnerError as exc:
            _log.warning("%s", exc)
            return None

    def _note_exits(self, running: Mapping[PodKey, Running], now: float) -> None:
        for key, state in running.items():
            held = self._pods[key]
            if not state.alive and held.exited_at is None:
                held.exited_at = now
                for name, child in held.children.items():
                    if child.poll() is not None:
                        log = self._log_path(key, name)
                        _log.warning(
                            "%s: %s exited with %s; last lines of %s:\n%s",
                            key,
                            name,
                            child.returncode,
                            log,
                            _tail(log),
                        )

    def _log_path(self, key: PodKey, container: str) -> Path:
        return self.options.work_dir / "logs" / f"{key.namespace}_{key.name}_{container}.log"

    def _spawn_all(
        self, key: PodKey, processes: Sequence[ProcessSpec]
    ) -> dict[str, subprocess.Popen[bytes]]:
        """Start every one of ``processes``, or none: a failure stops those already started."""
        children: dict[str, subprocess.Popen[bytes]] = {}
        for process in processes:
            log = self._log_path(key, process.container)
            try:
                children[process.container] = _spawn(process.argv, log, dict(process.env))
            except OSError as exc:
                for child in children.values():
                    child.kill()
                    child.wait()
                raise PodRunnerError(f"pod {key}: cannot start {process.argv[0]}: {exc}") from exc
        return children

    def _fail(self, key: PodKey, error: PodRunnerError) -> None:
        _log.error("%s", error)
        self._failed[key] = str(error)

    def _start_pod(self, pod: Pod) -> None:
        try:
            launch = launch_plan(pod, self.options.sim, self.options.specops_command)
            for process in launch.processes:
                _refuse_taken(launch.key, process)
            children = self._spawn_all(launch.key, launch.processes)
        except PodRunnerError as exc:
            self._fail(pod.key, exc)
            return
        _log.info(
            "%s: started engine on %s (speculative config %s)",
            pod.key,
            launch.engine.url,
            launch.speculative_config or "off",
        )
        self._pods[pod.key] = _PodProcesses(launch, children)

    def _begin_stop(self, held: _PodProcesses) -> None:
        """Stop a pod that went, in the background: out of the proxy already (it is no
        longer held), its containers signalled on the kubelet's schedule."""
        key = held.launch.key
        _log.info("%s: stopping within its %g s grace period", key, held.launch.grace_s)
        task = asyncio.create_task(self._stop_pod(held))
        self._stopping[key] = (held, task)
        task.add_done_callback(lambda _: self._stopping.pop(key, None))

    async def _stop_pod(self, held: _PodProcesses, *, exiting: bool = False) -> None:
        launch = held.launch
        await asyncio.gather(
            *(
                _stop(
                    held.children[process.container],
                    EXIT_STOP if exiting else stop_times(process.pre_stop_s, launch.grace_s),
                )
                for process in launch.processes
            )
        )
        statuses = {name: child.returncode for name, child in held.children.items()}
        _log.info("%s: stopped (exit statuses %s)", launch.key, statuses)

    def _restart_pod(self, held: _PodProcesses) -> None:
        """Start the pod's dead processes again, as the kubelet restarts a failed container;
        the others run on."""
        key = held.launch.key
        dead = [p for p in held.launch.processes if held.children[p.container].poll() is not None]
        held.restarts += 1
        held.exited_at = None
        held.probes.clear()
        _log.info("%s: restart %d of %s", key, held.restarts, ", ".join(p.container for p in dead))
        try:
            held.children = {**held.children, **self._spawn_all(key, dead)}
        except PodRunnerError as exc:
            del self._pods[key]
            self._begin_stop(held)
            self._fail(key, exc)

    async def _probe(self, session: aiohttp.ClientSession) -> None:
        async def healthy(process: ProcessSpec) -> bool:
            try:
                async with session.get(
                    process.url + process.health_path,
                    timeout=aiohttp.ClientTimeout(total=process.probe.timeout_s),
                ) as response:
                    return response.status == 200
            except (aiohttp.ClientError, TimeoutError):
                return False

        async def probe(held: _PodProcesses) -> None:
            processes = held.launch.processes
            results = await asyncio.gather(*(healthy(p) for p in processes))
            for process, ok in zip(processes, results, strict=True):
                before = held.probes.get(process.container, ProbeState())
                held.probes[process.container] = probed(before, ok, process.probe.failure_threshold)

        await asyncio.gather(*(probe(held) for held in self._pods.values()))

    async def _mark_readiness(self, pods: Sequence[Pod], claimed: Collection[PodKey]) -> None:
        """Tell the API server which pods are ready: a pod not started yet (waiting for its
        address) or that failed to run is not, and is claimed by saying so."""
        ready = dict.fromkeys(claimed, False) | dict.fromkeys(self._failed, False)
        ready |= {key: held.ready for key, held in self._pods.items()}
        for key, value in readiness_marks(pods, ready):
            try:
                await asyncio.to_thread(self.source.mark_engine_ready, key, value)
            except PodRunnerError as exc:
                _log.warning("%s (retrying on the next pass)", exc)
                continue
            _log.info("%s: %s", key, "ready" if value else "not ready")

    async def _release(self, pods: Sequence[Pod], nodes: frozenset[str]) -> None:
        """Delete for good the Terminating pods whose processes have all stopped."""
        holding = {*self._pods, *self._stopping}
        for key in released_pods(pods, nodes, holding):
            try:
                await asyncio.to_thread(self.source.release_pod, key)
            except PodRunnerError as exc:
                _log.warning("%s (retrying on the next pass)", exc)
                continue
            _log.info("%s: deleted (its processes have stopped)", key)

    # -- proxies -------------------------------------------------------------------
    def _ready_engines(self, namespace: str, service: str) -> list[str]:
        return [
            held.launch.engine.url
            for key, held in sorted(self._pods.items())
            if held.ready and (key.namespace, held.launch.service) == (namespace, service)
        ]

    async def _sync_proxies(self, session: aiohttp.ClientSession) -> None:
        if not self.options.proxies:
            return
        # A stopping pod keeps its service's proxy, for the requests it is still serving.
        launches = [h.launch for h in (*self._pods.values(), *self._held_stopping())]
        services = {(launch.key.namespace, launch.service) for launch in launches}
        for gone in set(self._proxies) - services:
            await self._proxies.pop(gone).runner.cleanup()
        for namespace, service in sorted(services - set(self._proxies)):
            app = build_proxy_app(
                partial(self._ready_engines, namespace, service), self._proxy_session or session
            )
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, LOOPBACK, 0).start()
            host, port = runner.addresses[0][:2]
            self._proxies[(namespace, service)] = _Proxy(runner, f"http://{host}:{port}")
            _log.info(
                "%s/%s: proxy on %s", namespace, service, self._proxies[(namespace, service)].url
            )

    # -- publishing ----------------------------------------------------------------
    def _write_if_changed(self, path: Path, text: str) -> None:
        if self._written.get(path) == text:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(text)
        os.replace(temporary, path)
        self._written[path] = text

    def _write_targets(self) -> None:
        launches = [held.launch for _, held in sorted(self._pods.items())]
        self._write_if_changed(
            self.options.file_sd, json.dumps(file_sd_targets(launches), indent=2)
        )

    def _held_stopping(self) -> list[_PodProcesses]:
        return [held for _, (held, _) in sorted(self._stopping.items())]

    def state(self) -> RunnerState:
        """What the runner holds now."""
        return RunnerState(
            prometheus_url=self._prometheus_url,
            pods=tuple(_endpoints(held) for _, held in sorted(self._pods.items())),
            stopping=tuple(_endpoints(held) for held in self._held_stopping()),
            services=tuple(
                ServiceEndpoint(namespace=namespace, service=service, url=proxy.url)
                for (namespace, service), proxy in sorted(self._proxies.items())
            ),
            failed=tuple(
                FailedPod(namespace=key.namespace, pod=key.name, uid=key.uid, error=error)
                for key, error in sorted(self._failed.items())
            ),
        )

    def _write_state(self) -> None:
        self._write_if_changed(self.options.state_file, self.state().model_dump_json(indent=2))

    # -- Prometheus and shutdown -----------------------------------------------------
    @asynccontextmanager
    async def _prometheus(self, binary: str, session: aiohttp.ClientSession) -> AsyncIterator[str]:
        executable = shutil.which(binary)
        if executable is None:
            raise PodRunnerError(
                f"Prometheus not found at {binary!r}: install Debian's `prometheus` package "
                "or pass --no-prometheus"
            )
        directory = self.options.work_dir / "prometheus"
        config = directory / "prometheus.yml"
        self._write_if_changed(
            config, prometheus_config(self.options.file_sd, self.options.scrape_interval_s)
        )
        (port,) = free_ports(1)
        url = f"http://{LOOPBACK}:{port}"
        log = directory / "prometheus.log"
        child = _spawn(
            (
                executable,
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address={url.removeprefix('http://')}",
                "--log.level=warn",
            ),
            log,
            {},
        )
        try:
            await self._await_ready(child, f"{url}/-/ready", session, log)
            _log.info("Prometheus on %s", url)
            yield url
        finally:
            await _stop(child, EXIT_STOP)

    async def _await_ready(
        self,
        child: subprocess.Popen[bytes],
        url: str,
        session: aiohttp.ClientSession,
        log: Path,
    ) -> None:
        deadline = time.monotonic() + _PROMETHEUS_START_S
        while time.monotonic() < deadline and child.poll() is None:
            with suppress(aiohttp.ClientError):
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.2)
        raise PodRunnerError(f"Prometheus did not become ready at {url}; its log:\n{_tail(log)}")

    async def _stop_everything(self) -> None:
        """Close the proxies, then stop every pod's processes at once, those still draining
        too: with no proxy in front of them there is nothing left to drain."""
        for proxy in self._proxies.values():
            await proxy.runner.cleanup()
        self._proxies.clear()
        held = [*self._pods.values(), *self._held_stopping()]
        draining = [task for _, task in self._stopping.values()]
        for task in draining:
            task.cancel()
        await asyncio.gather(*draining, return_exceptions=True)
        self._pods.clear()
        await asyncio.gather(*(self._stop_pod(h, exiting=True) for h in held))
        self._write_targets()
        self._write_state()
