"""The fleet-scale benchmark's run: the local control plane, the chart, one operator acting as
the chart's ServiceAccount, and N SpeculativeServices created, edited and resynced.

Phases, each measured on its own (see :class:`~specops_lab.scale._figures.ScaleFigures`):
creation of the fleet, a steady window, a burst of more creations with a user's edits among
them, and a restart of the operator."""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client, config
from kubernetes.utils import parse_quantity

from specops_lab.cluster import (
    ClusterInfo,
    ClusterOptions,
    RunFiles,
    prune_killed_runs,
    running_cluster,
)
from specops_lab.launch import (
    ChartRelease,
    LaunchError,
    OperatorProcess,
    installed_chart,
    operator_kubeconfig,
)
from specops_lab.scale._audit import by_kind, parse_audit, within
from specops_lab.scale._figures import ScaleFigures

__all__ = ["ScaleOptions", "run_scale"]

_NAMESPACE = "specops-fleet"
_RELEASE = "specops-scale"
_RUN_PREFIX = "scale-"
# After the fleet settled: long enough for the last Deployment status updates to pass.
_QUIET_S = 15.0
_HANDLED = "Handler 'service_changed' succeeded"
# What the local process is given in place of the chart's in-cluster endpoints.
_LOCAL_ARGS = ("--liveness", "--metrics-port")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ScaleOptions:
    """The fleet and how long each phase may take."""

    services: int = 100
    pods_per_service: int = 5
    gpu_nodes: int = 64
    burst: int = 300
    edits: int = 20
    steady_s: float = 120.0
    creators: int = 8
    timeout_s: float = 600.0


def _service(index: int, replicas: int) -> dict[str, Any]:
    """A SpeculativeService of the fleet: the README's example, one GPU per pod, no token."""
    return {
        "apiVersion": "specops.io/v1alpha1",
        "kind": "SpeculativeService",
        "metadata": {"name": f"svc-{index}", "namespace": _NAMESPACE},
        "spec": {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "replicas": replicas,
            "engine": {
                "gpusPerPod": 1,
                "maxNumSeqs": 256,
                "resources": {"requests": {"cpu": "8", "memory": "64Gi"}},
            },
            "speculation": {
                "method": "eagle3",
                "draftModel": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                "mode": "Auto",
                "numSpeculativeTokens": {"initial": 3, "min": 1, "max": 5},
            },
            "metrics": {"source": "Direct"},
        },
    }


class _Rss:
    """The operator's resident memory, sampled twice a second from /proc while it runs."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.peak_mib = 0.0
        self.last_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            pid = self.pid
            if pid is None:
                continue
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
            if found:
                self.last_mib = int(found.group(1)) / 1024.0
                self.peak_mib = max(self.peak_mib, self.last_mib)

    @contextmanager
    def running(self) -> Iterator[_Rss]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


class _Fleet:
    """The admin's view of the fleet namespace: creations, edits and the Deployments made."""

    def __init__(self, api: client.ApiClient, options: ScaleOptions) -> None:
        self._api = api
        self._custom = client.CustomObjectsApi(api)
        self._apps = client.AppsV1Api(api)
        self._options = options

    def create(self, indices: range) -> None:
        def one(index: int) -> None:
            body = _service(index, self._options.pods_per_service)
            self._custom.create_namespaced_custom_object(
                "specops.io", "v1alpha1", _NAMESPACE, "speculativeservices", body
            )

        with ThreadPoolExecutor(self._options.creators) as pool:
            list(pool.map(one, indices))

    def deployments(self) -> int:
        listed = self._apps.list_namespaced_deployment(
            _NAMESPACE, label_selector="app.kubernetes.io/managed-by=specops"
        )
        return len(listed.items)

    def running_pods(self) -> int:
        listed = client.CoreV1Api(self._api).list_namespaced_pod(
            _NAMESPACE,
            label_selector="app.kubernetes.io/managed-by=specops",
            field_selector="status.phase=Running",
        )
        return len(listed.items)

    def decided(self) -> int:
        """The services whose control loop has made its first decision."""
        listed = cast(
            dict[str, Any],
            self._custom.list_namespaced_custom_object(
                "specops.io", "v1alpha1", _NAMESPACE, "speculativeservices"
            ),
        )
        return len([s for s in listed["items"] if (s.get("status") or {}).get("lastDecision")])

    def settle(self, services: int, pods: int, deadline: float, quiet_s: float) -> None:
        """Wait until ``pods`` pods run (kwok's nodes start them), every service has decided
        once, and ``quiet_s`` more: what follows is the fleet at rest."""
        while time.monotonic() < deadline and (
            self.running_pods() < pods or self.decided() < services
        ):
            time.sleep(1.0)
        time.sleep(quiet_s)

    def wait_for(self, count: int, since: float, deadline: float) -> float | None:
        """Seconds from ``since`` until ``count`` Deployments exist; None past ``deadline``."""
        while self.deployments() < count:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.5)
        return time.monotonic() - since

    def edit(self, index: int, memory: str, timeout_s: float) -> float | None:
        """Change one service's memory request; seconds until its Deployment carries it."""
        patch = {"spec": {"engine": {"resources": {"requests": {"memory": memory}}}}}
        started = time.monotonic()
        self._custom.patch_namespaced_custom_object(
            "specops.io", "v1alpha1", _NAMESPACE, "speculativeservices", f"svc-{index}", patch
        )
        while time.monotonic() - started < timeout_s:
            read = self._apps.read_namespaced_deployment(f"svc-{index}", _NAMESPACE)
            deployment = self._api.sanitize_for_serialization(read)  # type: ignore[no-untyped-call]
            containers = deployment["spec"]["template"]["spec"]["containers"]
            if any(
                c.get("resources", {}).get("requests", {}).get("memory") == memory
                for c in containers
            ):
                return time.monotonic() - started
            time.sleep(0.05)
        return None


class _Audit:
    """The operator's requests in the API server's audit log."""

    def __init__(self, info: ClusterInfo, release: ChartRelease) -> None:
        namespace, name = release.service_account
        self.user = f"system:serviceaccount:{namespace}:{name}"
        self._log = RunFiles(info.run_dir).audit_log

    def between(self, start: float, end: float) -> list[Any]:
        with self._log.open(errors="replace") as lines:
            return within(parse_audit(lines), self.user, start, end)


def _operator(
    identity: Path, release: ChartRelease, log: Path, rss: _Rss, timeout_s: float
) -> OperatorProcess:
    args = [a for a in release.operator_args[1:] if not a.startswith(_LOCAL_ARGS)]
    args.append("--log-format=json")  # each line names its object: see _reconciled
    log.unlink(missing_ok=True)  # a run's logs are its own, not appended to an earlier run's
    operator = OperatorProcess(identity, log, extra_args=args)
    operator.start(timeout_s)
    rss.pid = operator.process.pid
    return operator


def _reconciled(log: Path) -> set[str]:
    """The services a process's log (kopf's JSON lines) says it reconciled."""
    names = set()
    for line in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short, or one not of kopf's
        ref = record.get("object") if isinstance(record, dict) else None
        if isinstance(ref, dict) and str(record.get("message", "")).startswith(_HANDLED):
            names.add(str(ref.get("name")))
    return names


def _steady(audit: _Audit, options: ScaleOptions, progress: Progress) -> tuple[list[Any], float]:
    progress(f"steady: counting the operator's requests for {options.steady_s:.0f} s")
    start = time.time()
    time.sleep(options.steady_s)
    end = time.time()
    time.sleep(2.0)  # requests answered after the window's end reach the log late
    return audit.between(start, end), end - start


def _burst_with_edits(
    fleet: _Fleet, options: ScaleOptions, deadline: float, progress: Progress
) -> tuple[float | None, list[float], int]:
    """Create ``burst`` more services while editing the first ones, one edit at a time."""
    progress(f"burst: creating {options.burst} more services while editing existing ones")
    total = options.services + options.burst
    started = time.monotonic()
    creating = threading.Thread(
        target=fleet.create, args=(range(options.services, total),), daemon=True
    )
    creating.start()
    latencies: list[float] = []
    lost = 0
    for edit in range(options.edits):
        # The burst lasts until the operator has made every Deployment of it, not only
        # until the last creation was sent: its queue is full until then.
        if edit > 0 and not creating.is_alive() and fleet.deployments() >= total:
            break
        latency = fleet.edit(edit % options.services, f"{40 + edit % 50}Gi", timeout_s=60.0)
        if latency is None:
            lost += 1
        else:
            latencies.append(latency)
        time.sleep(0.2)
    creating.join()
    created = fleet.wait_for(total, started, deadline)
    return created, latencies, lost


def _restart(
    audit: _Audit,
    identity: Path,
    release: ChartRelease,
    work: Path,
    rss: _Rss,
    operator: OperatorProcess,
    total: int,
    timeout_s: float,
    progress: Progress,
) -> tuple[OperatorProcess, float | None, int]:
    """Stop the operator and start a new one; seconds until it has reconciled every service,
    and the requests it sent until then."""
    progress("restart: a new operator process takes the fleet over")
    operator.stop()
    log = work / "operator-restarted.log"
    start = time.time()
    started = time.monotonic()
    operator = _operator(identity, release, log, rss, 120.0)
    converged: float | None = None
    while time.monotonic() - started < timeout_s:
        if len(_reconciled(log)) >= total:
            converged = time.monotonic() - started
            break
        time.sleep(0.5)
    time.sleep(2.0)
    end = start + (converged if converged is not None else timeout_s)
    return operator, converged, len(audit.between(start, end))


def run_scale(
    options: ScaleOptions, work: Path, progress: Progress, cluster: ClusterInfo | None = None
) -> ScaleFigures:
    """Run every phase on ``cluster``, or on a local control plane of its own sized for the
    fleet, and return what was measured (also written to ``work/figures.yaml``)."""
    work.mkdir(parents=True, exist_ok=True)
    values = {"operator": {"watchNamespaces": [_NAMESPACE]}}
    with ExitStack() as stack:
        info = cluster or stack.enter_context(running_cluster(_sized(options)))
        api = config.new_client_from_config(config_file=str(info.kubeconfig))  # type: ignore[no-untyped-call]
        stack.callback(api.close)
        # The namespace first: the chart grants the operator its Role there.
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=_NAMESPACE)))
        stack.callback(core.delete_namespace, _NAMESPACE)
        release = stack.enter_context(
            installed_chart(
                info.kubeconfig,
                release=_RELEASE,
                namespace=_RELEASE,
                values=values,
                operator_replicas=0,
            )
        )
        rss = stack.enter_context(_Rss().running())
        figures = _phases(info, release, api, rss, options, work, progress)
    (work / "figures.yaml").write_text(yaml.safe_dump(_plain(figures), sort_keys=False))
    return figures


def _sized(options: ScaleOptions) -> ClusterOptions:
    """A cluster of its own with a fake GPU for every pod of the fleet."""
    prune_killed_runs(_RUN_PREFIX)
    pods = (options.services + options.burst) * options.pods_per_service
    return ClusterOptions(
        name=f"{_RUN_PREFIX}{os.getpid()}",
        gpu_nodes=options.gpu_nodes,
        gpus_per_node=max(8, math.ceil(pods / options.gpu_nodes)),
    )


def _phases(
    info: ClusterInfo,
    release: ChartRelease,
    api: client.ApiClient,
    rss: _Rss,
    options: ScaleOptions,
    work: Path,
    progress: Progress,
) -> ScaleFigures:
    identity = operator_kubeconfig(info.kubeconfig, release, work / "operator.kubeconfig")
    audit, fleet = _Audit(info, release), _Fleet(api, options)
    operator = _operator(identity, release, work / "operator.log", rss, 120.0)
    try:
        progress(f"creating {options.services} services")
        started = time.monotonic()
        fleet.create(range(options.services))
        created = fleet.wait_for(options.services, started, started + options.timeout_s)
        progress("settling: waiting until the fleet's pods run and each service has decided")
        pods = options.services * options.pods_per_service
        fleet.settle(options.services, pods, time.monotonic() + options.timeout_s, _QUIET_S)
        steady, window = _steady(audit, options, progress)
        steady_rss = rss.last_mib
        burst_created, latencies, lost = _burst_with_edits(
            fleet, options, time.monotonic() + options.timeout_s, progress
        )
        operator, converged, restart_requests = _restart(
            audit,
            identity,
            release,
            work,
            rss,
            operator,
            options.services + options.burst,
            options.timeout_s,
            progress,
        )
    finally:
        operator.stop()
    return ScaleFigures(
        services=options.services,
        pods_per_service=options.pods_per_service,
        gpu_nodes=options.gpu_nodes,
        created_s=created,
        steady_window_s=window,
        steady_requests=len(steady),
        steady_writes=sum(1 for r in steady if r.writes),
        steady_by_kind=tuple(by_kind(steady)),
        rss_peak_mib=rss.peak_mib,
        rss_steady_mib=steady_rss,
        burst_services=options.burst,
        burst_created_s=burst_created,
        edit_latencies_s=tuple(latencies),
        edits_lost=lost,
        restart_converged_s=converged,
        restart_requests=restart_requests,
        memory_limit_mib=_chart_limit(release),
    )


def _chart_limit(release: ChartRelease) -> float:
    """The memory limit the chart gives the operator's container, in MiB."""
    deployment = next(o for o in release.objects if o["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    limit = container.get("resources", {}).get("limits", {}).get("memory")
    if limit is None:
        raise LaunchError("the chart sets no memory limit for the operator: nothing to meet")
    return float(parse_quantity(limit)) / 2**20  # type: ignore[no-untyped-call]


def _plain(figures: ScaleFigures) -> dict[str, Any]:
    plain = asdict(figures)
    plain["steady_by_kind"] = [list(k) for k in figures.steady_by_kind]
    plain["edit_latencies_s"] = list(figures.edit_latencies_s)
    return plain
