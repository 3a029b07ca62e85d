"""The local control plane: bring it up, report on it, tear it down.

This is the imperative shell over ``_config`` (what to run) and ``_build`` (where
the binaries come from). A cluster is named; its run directory holds a ``state.json``
process table, so ``specops cluster down`` in another shell stops what ``up``
started. A failed or interrupted ``up`` stops whatever it had already started.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from specops.errors import ClusterError
from specops_lab.cluster._build import Progress, ensure_binaries, kwok_stage_files
from specops_lab.cluster._config import (
    SERVICE_IP,
    Binaries,
    ClientCredentials,
    Component,
    Ports,
    audit_policy,
    fake_node,
    free_pod_block,
    kwok_config,
    node_pod_cidr,
    render_kubeconfig,
    startup_waves,
)
from specops_lab.cluster._layout import CacheLayout, RunFiles, Versions
from specops_lab.cluster._pki import (
    CertKey,
    issue_certificate,
    new_ca,
    new_private_key,
    public_key_pem,
)
from specops_lab.cluster._process import free_ports, is_running, spawn, stop_all

__all__ = [
    "ClusterInfo",
    "ClusterOptions",
    "ClusterStatus",
    "ComponentStatus",
    "LocalCluster",
    "running_cluster",
]

# Client identities: user = CN, groups = O. The controller-manager and scheduler use
# the names their bootstrap ClusterRoleBindings expect; kwok writes node and pod status
# for every fake node, so it gets the admin group.
_IDENTITIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("kubernetes-admin", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    "kwok": ("kwok-controller", ("system:masters",)),
}
_SERVING_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
_LOG_TAIL_LINES = 20


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ClusterOptions:
    """What to run: the cluster's name (its run directory) and its fake nodes."""

    name: str = "default"
    gpu_nodes: int = 2
    gpus_per_node: int = 8
    cpu_nodes: int = 1
    versions: Versions = field(default_factory=Versions)
    start_timeout_s: float = 120.0

    def node_manifests(self, pod_block: int) -> tuple[dict[str, Any], ...]:
        """The fake nodes, their pods' addresses in ``pod_block`` (the cluster's own)."""
        names = [(f"kwok-gpu-{i}", self.gpus_per_node) for i in range(self.gpu_nodes)]
        names += [(f"kwok-cpu-{i}", 0) for i in range(self.cpu_nodes)]
        return tuple(
            fake_node(name, gpus, node_pod_cidr(pod_block, index))
            for index, (name, gpus) in enumerate(names)
        )


@dataclass(frozen=True)
class ClusterInfo:
    """How to reach a running cluster."""

    name: str
    run_dir: Path
    server: str
    kubeconfig: Path


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int
    running: bool
    log: Path


@dataclass(frozen=True)
class ClusterStatus:
    info: ClusterInfo
    components: tuple[ComponentStatus, ...]
    api_ready: bool


class _Process(BaseModel):
    name: str
    pid: int
    executable: str
    log: str


class _State(BaseModel):
    """The process table in ``state.json``: what ``down`` and ``status`` read."""

    name: str
    server: str
    kubeconfig: str
    ports: dict[str, int]
    pod_block: int = 0
    processes: list[_Process] = []


def _read_state(path: Path) -> _State | None:
    """A cluster's ``state.json``; None when it is missing or unreadable (nothing is up)."""
    try:
        return _State.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None


def _tail(log: Path) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:])
    except OSError:
        return "(no log)"


class LocalCluster:
    """One named local control plane: etcd, the three kube components, and kwok."""

    def __init__(
        self,
        options: ClusterOptions | None = None,
        *,
        layout: CacheLayout | None = None,
        progress: Progress = _stderr,
    ) -> None:
        self.options = options or ClusterOptions()
        self.layout = layout or CacheLayout.from_env()
        self.files = RunFiles(self.layout.run(self.options.name))
        self._progress = progress
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # -- reading state -------------------------------------------------------------
    def _state(self) -> _State | None:
        return _read_state(self.files.state)

    def _info(self, state: _State) -> ClusterInfo:
        return ClusterInfo(state.name, self.files.dir, state.server, Path(state.kubeconfig))

    def _api_ready(self, server: str) -> bool:
        try:
            with httpx.Client(verify=self._trusted_context(), timeout=2.0) as client:
                return client.get(f"{server}/readyz").status_code == 200
        except (httpx.HTTPError, OSError, ssl.SSLError):
            return False

    def status(self) -> ClusterStatus | None:
        """The recorded processes and whether each still runs; ``None`` when nothing is up."""
        state = self._state()
        if state is None:
            return None
        components = tuple(
            ComponentStatus(p.name, p.pid, is_running(p.pid, p.executable), Path(p.log))
            for p in state.processes
        )
        return ClusterStatus(self._info(state), components, self._api_ready(state.server))

    # -- bringing up ---------------------------------------------------------------
    def up(self, *, tie_to_parent: bool = False) -> ClusterInfo:
        """Start the cluster (building binaries on first use) or return the one already running.

        ``tie_to_parent`` makes every process die with this Python process (for tests).
        """
        current = self.status()
        if current is not None and current.api_ready and all(c.running for c in current.components):
            return current.info
        if current is not None:
            self._progress(f"Cleaning up the stale cluster {self.options.name!r}")
            self.down()
        binaries = ensure_binaries(self.layout, self.options.versions, self._progress)
        started = time.monotonic()
        try:
            info = self._start(binaries, tie_to_parent)
        except BaseException:
            self._progress(f"Start failed; stopping what was started (logs: {self.files.dir})")
            self.down(keep_logs=True)
            raise
        took = time.monotonic() - started
        self._progress(f"Control plane {self.options.name!r} up in {took:.1f} s at {info.server}")
        return info

    def _start(self, binaries: Binaries, tie_to_parent: bool) -> ClusterInfo:
        if self.files.dir.exists():
            shutil.rmtree(self.files.dir)
        self.files.dir.mkdir(parents=True)
        names = ("etcd_client", "etcd_peer", "apiserver", "controller_manager", "scheduler", "kwok")
        ports = Ports(*free_ports(len(names)))
        self._write_files(ports)
        with self._pod_blocks_locked() as held:
            state = _State(
                name=self.options.name,
                server=ports.server,
                kubeconfig=str(self.files.kubeconfig),
                ports=dict(zip(names, (getattr(ports, n) for n in names), strict=True)),
                pod_block=free_pod_block(held),
            )
            self.files.state.write_text(state.model_dump_json(indent=2))
        for wave in startup_waves(binaries, self.files, ports):
            procs = [self._launch(component, state, tie_to_parent) for component in wave]
            for component, proc in zip(wave, procs, strict=True):
                self._wait_healthy(component, proc, ports)
        self._add_nodes(ports.server, state.pod_block)
        return self._info(state)

    @contextmanager
    def _pod_blocks_locked(self) -> Iterator[set[int]]:
        """The pod-address blocks the other clusters under this cache hold, read under a
        lock held until this one's state (with its block) is written."""
        run_root = self.files.dir.parent
        with (run_root / ".pod-blocks.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            held = set()
            for state_file in run_root.glob(f"*/{self.files.state.name}"):
                state = _read_state(state_file)
                # A cluster still starting has no processes yet; one whose processes all
                # died holds nothing.
                if (
                    state_file != self.files.state
                    and state is not None
                    and (
                        not state.processes
                        or any(is_running(p.pid, p.executable) for p in state.processes)
                    )
                ):
                    held.add(state.pod_block)
            yield held

    def _write_files(self, ports: Ports) -> None:
        files = self.files
        now = dt.datetime.now(dt.UTC)
        files.pki.mkdir(parents=True)
        ca = new_ca("specops-local-ca", now)
        serving = issue_certificate(
            ca,
            "kube-apiserver",
            now,
            dns_names=_SERVING_NAMES,
            ip_addresses=("127.0.0.1", SERVICE_IP),
        )
        self._write_pair(ca, files.ca_cert, files.ca_key)
        self._write_pair(serving, files.serving_cert, files.serving_key)
        signing_key = new_private_key()
        files.service_account_key.write_bytes(signing_key)
        files.service_account_public_key.write_bytes(public_key_pem(signing_key))
        for component, (user, groups) in _IDENTITIES.items():
            pair = issue_certificate(ca, user, now, organizations=groups)
            path = (
                files.kubeconfig if component == "admin" else files.component_kubeconfig(component)
            )
            credentials = ClientCredentials(cert_pem=pair.cert_pem, key_pem=pair.key_pem)
            path.write_text(render_kubeconfig(ports.server, ca.cert_pem, user, credentials))
            path.chmod(0o600)
            if component == "admin":
                self._write_pair(pair, files.pki / "admin.crt", files.pki / "admin.key")
        stages = kwok_stage_files(self.layout, self.options.versions.kwok)
        files.kwok_config.write_text(kwok_config(tuple(p.read_text() for p in stages)))
        files.audit_policy.write_text(audit_policy())

    @staticmethod
    def _write_pair(pair: CertKey, cert: Path, key: Path) -> None:
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        key.chmod(0o600)

    def _trusted_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.files.ca_cert))
        context.load_cert_chain(self.files.pki / "admin.crt", self.files.pki / "admin.key")
        return context

    def _launch(
        self, component: Component, state: _State, tie_to_parent: bool
    ) -> subprocess.Popen[bytes]:
        log = self.files.log(component.name)
        proc = spawn(component.argv, log, tie_to_parent=tie_to_parent)
        self._children[proc.pid] = proc
        entry = _Process(
            name=component.name, pid=proc.pid, executable=component.argv[0], log=str(log)
        )
        state.processes.append(entry)
        self.files.state.write_text(state.model_dump_json(indent=2))
        return proc

    def _wait_healthy(
        self, component: Component, proc: subprocess.Popen[bytes], ports: Ports
    ) -> None:
        log = self.files.log(component.name)
        if component.health_url.startswith(ports.server):
            verify: ssl.SSLContext | bool = self._trusted_context()
        else:
            verify = False  # the component's own self-signed serving certificate
        deadline = time.monotonic() + self.options.start_timeout_s
        with httpx.Client(verify=verify, timeout=2.0) as client:
            while True:
                code = proc.poll()
                if code is not None:
                    raise ClusterError(
                        f"{component.name} exited with status {code} while starting;"
                        f" its log {log} ends with:\n{_tail(log)}"
                    )
                try:
                    if client.get(component.health_url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"{component.name} was not healthy at {component.health_url} after"
                        f" {self.options.start_timeout_s:.0f} s;"
                        f" its log {log} ends with:\n{_tail(log)}"
                    )
                time.sleep(0.2)

    def _add_nodes(self, server: str, pod_block: int) -> None:
        """Create the fake nodes, then wait for kwok to make them Ready and for the
        controller-manager to create the ``default`` ServiceAccount (pods need it)."""
        manifests = self.options.node_manifests(pod_block)
        names = {n["metadata"]["name"] for n in manifests}
        with httpx.Client(base_url=server, verify=self._trusted_context(), timeout=10.0) as api:
            for node in manifests:
                api.post("/api/v1/nodes", json=node).raise_for_status()

            def nodes_ready() -> bool:
                listed = api.get("/api/v1/nodes", params={"labelSelector": "type=kwok"}).json()
                ready = {
                    item["metadata"]["name"]
                    for item in listed["items"]
                    for condition in item.get("status", {}).get("conditions", [])
                    if condition["type"] == "Ready" and condition["status"] == "True"
                }
                return names <= ready

            def default_account() -> bool:
                path = "/api/v1/namespaces/default/serviceaccounts/default"
                return api.get(path).status_code == 200

            self._poll(nodes_ready, "kwok to make the fake nodes Ready", "kwok")
            self._poll(default_account, "the default ServiceAccount", "kube-controller-manager")

    def _poll(self, done: Callable[[], bool], what: str, blame: str) -> None:
        deadline = time.monotonic() + self.options.start_timeout_s
        while not done():
            if time.monotonic() > deadline:
                log = self.files.log(blame)
                raise ClusterError(
                    f"timed out waiting for {what}; the log {log} ends with:\n{_tail(log)}"
                )
            time.sleep(0.2)

    # -- tearing down --------------------------------------------------------------
    def _reap(self, pid: int) -> None:
        child = self._children.get(pid)
        if child is not None and child.poll() is not None:
            del self._children[pid]

    def down(self, *, keep_logs: bool = False) -> bool:
        """Stop every recorded process (newest first) and remove the run directory.

        Returns whether there was anything to stop. ``keep_logs`` leaves ``logs/``.
        """
        state = self._state()
        if state is not None:
            processes = [(p.pid, p.executable) for p in reversed(state.processes)]
            stop_all(processes, reap=self._reap)
        if self.files.dir.exists():
            for entry in self.files.dir.iterdir():
                if keep_logs and entry.name == "logs":
                    continue
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            if not keep_logs:
                self.files.dir.rmdir()
        return state is not None


@contextmanager
def running_cluster(
    options: ClusterOptions, *, layout: CacheLayout | None = None, progress: Progress = _stderr
) -> Iterator[ClusterInfo]:
    """A cluster tied to this process for the ``with`` block: stopped on exit, error or Ctrl-C."""
    cluster = LocalCluster(options, layout=layout, progress=progress)
    info = cluster.up(tie_to_parent=True)
    try:
        yield info
    finally:
        cluster.down()


def prune_killed_runs(prefix: str, layout: CacheLayout | None = None) -> None:
    """Remove the run directories that a run named ``<prefix><pid>`` left when it was killed
    outright (SIGKILL, OOM): its processes died with it (they are tied to it)."""
    layout = layout or CacheLayout.from_env()
    for run_dir in (layout.root / "run").glob(f"{prefix}*"):
        owner = run_dir.name.removeprefix(prefix)
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            LocalCluster(ClusterOptions(name=run_dir.name), layout=layout).down()
