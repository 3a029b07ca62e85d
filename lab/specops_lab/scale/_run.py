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
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client, config
from kubernetes.utils import parse_quantity
from specops_operator import rollout_complete, shard_of

from specops_lab.cluster import (
    ClusterInfo,
    ClusterOptions,
    LocalCluster,
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
from specops_lab.scale._audit import AuditRequest, by_kind, parse_audit, within
from specops_lab.scale._figures import EditPath, PhaseLoad, ScaleFigures, nearest_rank
from specops_lab.scale._sharded import ShardRun, overlapping, writers_by_service

__all__ = ["ScaleOptions", "run_scale"]

_NAMESPACE = "specops-fleet"
_RELEASE = "specops-scale"
_RUN_PREFIX = "scale-"
# After the fleet settled: long enough for the last Deployment status updates to pass.
_QUIET_S = 15.0
_HANDLED = "Handler 'service_changed' succeeded"
# What the local process is given in place of the chart's in-cluster endpoints.
_LOCAL_ARGS = ("--liveness", "--metrics-port")
# The chart's sharding arguments: the single-operator phases run without them.
_SHARD_ARGS = "--shard"
_MANAGED = "app.kubernetes.io/managed-by=specops"
# A list of the objects' metadata only: what a count needs, a small share of the bytes.
_METADATA_ONLY = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}
# The User-Agent of kopf's own client (watches, its patches, Events): not rate-limited.
_KOPF_AGENT = "kopf/"

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
    # The sharded phase: this many replicas over this many shards (0 replicas: skipped).
    shard_replicas: int = 3
    shards: int = 3
    shard_lease_s: float = 15.0


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


def _process_cpu_s(pid: int | None) -> float:
    """A process's user and system CPU seconds (all its threads), 0 when it is gone."""
    if pid is None:
        return 0.0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_cpu_s() -> tuple[float, int]:
    """The machine's busy CPU seconds since boot (every core; idle and I/O wait left out),
    and its cores, as /proc/stat counts them."""
    lines = Path("/proc/stat").read_text().splitlines()
    ticks = [int(v) for v in lines[0].split()[1:]]
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]  # user..steal, less idle and iowait
    cores = sum(1 for line in lines if re.match(r"cpu\d+ ", line))
    return busy / os.sysconf("SC_CLK_TCK"), cores


@dataclass(frozen=True)
class _Mark:
    """Where a phase started: wall clock (the audit log's), CPU used so far by the operator
    and by each process of the control plane, and the machine's busy CPU and cores."""

    at: float
    operator_cpu_s: float
    components_cpu_s: tuple[tuple[str, float], ...]
    machine_cpu_s: float
    cores: int

    @classmethod
    def now(cls, pid: int | None, components: Mapping[str, int]) -> _Mark:
        used = tuple((name, _process_cpu_s(p)) for name, p in components.items())
        return cls(time.time(), _process_cpu_s(pid), used, *_machine_cpu_s())

    def load(
        self,
        audit: _Audit,
        pid: int | None,
        components: Mapping[str, int],
        limit: tuple[float | None, int],
    ) -> PhaseLoad:
        """The phase from this mark until now."""
        end = _Mark.now(pid, components)
        wall = end.at - self.at
        time.sleep(2.0)  # requests answered before the end reach the log late
        requests = audit.between(self.at, end.at)
        before = dict(self.components_cpu_s)
        capacity = wall * end.cores
        # /proc/stat counts whole ticks per core, read a moment apart from the wall clock:
        # a phase under a second can read a tick or two more busy time than the machine had.
        busy = min(end.machine_cpu_s - self.machine_cpu_s, capacity)
        return PhaseLoad(
            wall_s=wall,
            requests=len(requests),
            limited=sum(1 for r in requests if not r.agent.startswith(_KOPF_AGENT)),
            operator_cpu_s=end.operator_cpu_s - self.operator_cpu_s,
            machine_cpu_s=busy,
            capacity_cpu_s=capacity,
            limit_qps=limit[0],
            limit_burst=limit[1],
            components_cpu_s=tuple(
                (name, cpu - before.get(name, 0.0)) for name, cpu in end.components_cpu_s
            ),
        )


def _components(info: ClusterInfo) -> dict[str, int]:
    """The processes of the local control plane by name (etcd, the kube components, kwok);
    none for a cluster this machine did not start."""
    status = LocalCluster(ClusterOptions(name=info.name)).status()
    if status is None or status.info.run_dir != info.run_dir:
        return {}
    return {c.name: c.pid for c in status.components if c.running}


def _limit(release: ChartRelease) -> tuple[float | None, int]:
    """The operator's client-side rate limit as the chart sets it (None: no limit), and its
    burst."""
    values = dict(a.split("=", 1) for a in release.operator_args if a.startswith("--kube-"))
    qps = float(values.get("--kube-qps", "0"))
    return (qps if qps > 0 else None), int(values.get("--kube-burst", "0"))


def _asks_for(deployment: dict[str, Any], memory: str) -> bool:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return any(
        c.get("resources", {}).get("requests", {}).get("memory") == memory for c in containers
    )


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

    def shards(self, shards: int) -> dict[int, int]:
        """The shard of each service by its index, by its uid as the operator hashes it."""
        listed = cast(
            dict[str, Any],
            self._custom.list_namespaced_custom_object(
                "specops.io", "v1alpha1", _NAMESPACE, "speculativeservices"
            ),
        )
        return {
            int(s["metadata"]["name"].removeprefix("svc-")): shard_of(s["metadata"]["uid"], shards)
            for s in listed["items"]
        }

    def _listed(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """A list's items as plain JSON: the benchmark polls a fleet of thousands of objects,
        and turning each answer into the client's models would take a share of the CPU it
        measures."""
        response = call(*args, _preload_content=False, **kwargs)
        return cast(list[Any], json.loads(response.data).get("items") or [])  # null when none

    def deployments(self) -> int:
        return len(self._deployments(_METADATA_ONLY))

    def _deployments(self, headers: dict[str, str] | None = None) -> list[Any]:
        return self._listed(
            self._apps.list_namespaced_deployment,
            _NAMESPACE,
            label_selector=_MANAGED,
            _headers=headers,
        )

    def running_pods(self) -> int:
        return len(
            self._listed(
                client.CoreV1Api(self._api).list_namespaced_pod,
                _NAMESPACE,
                label_selector=_MANAGED,
                field_selector="status.phase=Running",
                _headers=_METADATA_ONLY,
            )
        )

    def decided(self) -> int:
        """The services whose control loop has made its first decision."""
        return self._services_at_rest()[0]

    def _services_at_rest(self) -> tuple[int, int]:
        """The services that have decided once, and those whose status counts every one of
        their pods ready (the reconciler has seen its Deployment's last change)."""
        listed = self._listed(
            self._custom.list_namespaced_custom_object,
            "specops.io",
            "v1alpha1",
            _NAMESPACE,
            "speculativeservices",
        )
        statuses = [(s.get("spec") or {}, s.get("status") or {}) for s in listed]
        decided = sum(1 for _, status in statuses if status.get("lastDecision"))
        ready = sum(
            1
            for spec, status in statuses
            if status.get("readyReplicas", 0) >= spec.get("replicas", 1)
        )
        return decided, ready

    def ready_deployments(self) -> int:
        """The Deployments whose status is current and counts every replica updated and
        ready: the controller-manager has caught up with them."""
        return sum(1 for d in self._deployments() if _at_rest(d))

    def settle(self, services: int, pods: int, deadline: float, quiet_s: float) -> str:
        """Wait until ``pods`` pods run (kwok's nodes start them), every Deployment's status
        has caught up with them, every service has decided once and reports its pods ready,
        and ``quiet_s`` more: what follows is the fleet at rest. Empty when it came to rest;
        otherwise what was still on its way at ``deadline``.

        Pods running are not yet a fleet at rest: on a busy control plane the
        controller-manager updates the Deployments' status minutes later, and every such
        update is a change the operator rightly reports."""
        while True:
            running = self.running_pods()
            # Deployments are listed whole only once every pod runs.
            deployments = self.ready_deployments() if running >= pods else None
            decided, ready = self._services_at_rest()
            caught_up = deployments is not None and deployments >= services
            if caught_up and min(decided, ready) >= services:
                time.sleep(quiet_s)
                return ""
            if time.monotonic() >= deadline:
                counted = (
                    f"{deployments} of {services} Deployments' status caught up, "
                    if deployments is not None
                    else ""
                )
                return (
                    f"{running} of {pods} pods running, {counted}{decided} of {services} "
                    f"services decided and {ready} reporting their pods ready at the "
                    "settling timeout"
                )
            time.sleep(2.0)

    def wait_for(self, count: int, since: float, deadline: float) -> float | None:
        """Seconds from ``since`` until ``count`` Deployments exist; None past ``deadline``."""
        while self.deployments() < count:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.5)
        return time.monotonic() - since

    def edit_all(self, count: int, memory: str, deadline: float) -> bool:
        """Change the memory request of the first ``count`` services at once; whether every
        Deployment carries it by ``deadline``."""
        patch = {"spec": {"engine": {"resources": {"requests": {"memory": memory}}}}}

        def one(index: int) -> None:
            self._custom.patch_namespaced_custom_object(
                "specops.io", "v1alpha1", _NAMESPACE, "speculativeservices", f"svc-{index}", patch
            )

        with ThreadPoolExecutor(self._options.creators) as pool:
            list(pool.map(one, range(count)))
        while self._carrying(memory) < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(1.0)
        return True

    def _carrying(self, memory: str) -> int:
        """The Deployments whose containers ask for ``memory``."""
        return sum(1 for d in self._deployments() if _asks_for(d, memory))

    def edit(self, index: int, memory: str, timeout_s: float) -> _Edit | None:
        """Change one service's memory request; when it was sent, answered and seen carried
        by its Deployment (None: not within ``timeout_s``)."""
        patch = {"spec": {"engine": {"resources": {"requests": {"memory": memory}}}}}
        started, wall = time.monotonic(), time.time()
        self._custom.patch_namespaced_custom_object(
            "specops.io", "v1alpha1", _NAMESPACE, "speculativeservices", f"svc-{index}", patch
        )
        patched = time.monotonic() - started
        while time.monotonic() - started < timeout_s:
            read = self._apps.read_namespaced_deployment(f"svc-{index}", _NAMESPACE)
            deployment = self._api.sanitize_for_serialization(read)  # type: ignore[no-untyped-call]
            if _asks_for(deployment, memory):
                return _Edit(f"svc-{index}", wall, patched, time.monotonic() - started)
            time.sleep(0.05)
        return None


@dataclass(frozen=True)
class _Edit:
    """One timed edit: the service, when it was sent (wall clock, the audit log's), and
    seconds until the API server answered it and until its Deployment carried it."""

    service: str
    sent_at: float
    patched_s: float
    seen_s: float

    def path(self, requests: list[AuditRequest]) -> EditPath | None:
        """Where its time went, by the operator's first write of the service's Deployment
        after it was sent (None when the audit log holds none)."""
        applies = [
            r
            for r in requests
            if r.resource == "deployments"
            and r.name == self.service
            and r.writes
            and r.at >= self.sent_at
        ]
        if not applies:
            return None
        first = min(applies, key=lambda r: r.at)
        received = first.at - self.sent_at
        return EditPath(
            service=self.service,
            total_s=self.seen_s,
            patched_s=self.patched_s,
            until_sent_s=max(0.0, received - self.patched_s),
            answered_s=(first.done or first.at) - first.at,
        )


class _Audit:
    """The operator's requests in the API server's audit log."""

    def __init__(self, info: ClusterInfo, release: ChartRelease) -> None:
        namespace, name = release.service_account
        self.user = f"system:serviceaccount:{namespace}:{name}"
        self._log = RunFiles(info.run_dir).audit_log

    def between(self, start: float, end: float) -> list[AuditRequest]:
        with self._log.open(errors="replace") as lines:
            return within(parse_audit(lines), self.user, start, end)


def _args(release: ChartRelease, *, sharded: bool) -> list[str]:
    """The chart's arguments for a local process, with or without its sharding."""
    args = [
        a
        for a in release.operator_args[1:]
        if not a.startswith(_LOCAL_ARGS) and (sharded or not a.startswith(_SHARD_ARGS))
    ]
    return [*args, "--log-format=json"]  # each line names its object: see _reconciled


def _operator(
    identity: Path, release: ChartRelease, log: Path, rss: _Rss, timeout_s: float
) -> OperatorProcess:
    log.unlink(missing_ok=True)  # a run's logs are its own, not appended to an earlier run's
    operator = OperatorProcess(identity, log, extra_args=_args(release, sharded=False))
    operator.start(timeout_s)
    rss.pid = operator.process.pid
    return operator


class _Leases:
    """The shard Leases as the admin reads them: who holds which shard."""

    def __init__(self, api: client.ApiClient, release: ChartRelease) -> None:
        self._client, self._api = api, client.CoordinationV1Api(api)
        self._namespace = release.namespace
        group = next(a for a in release.operator_args if a.startswith("--shard-group="))
        self._selector = (
            f"specops.io/lease-group={group.split('=', 1)[1]},specops.io/lease-role=shard"
        )

    def holders(self) -> dict[int, str | None]:
        listed = self._api.list_namespaced_lease(self._namespace, label_selector=self._selector)
        plain = self._client.sanitize_for_serialization(listed)  # type: ignore[no-untyped-call]
        return {
            int(lease["metadata"]["labels"]["specops.io/shard"]): lease["spec"].get(
                "holderIdentity"
            )
            for lease in plain["items"]
        }


def _fair(holders: dict[int, str | None], shards: int, replicas: list[str]) -> bool:
    """Every shard held by one of ``replicas``, each holding its fair share."""
    if len(holders) < shards or any(h not in replicas for h in holders.values()):
        return False
    share = math.ceil(shards / len(replicas))
    counts = [list(holders.values()).count(r) for r in replicas]
    return max(counts) <= share and sum(counts) == shards


def _poll(done: Callable[[], bool], since: float, deadline: float) -> float | None:
    """Seconds from ``since`` until ``done`` holds (polled five times a second); None past
    ``deadline``."""
    while not done():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)
    return time.monotonic() - since


def _sharded(
    api: client.ApiClient,
    audit: _Audit,
    fleet: _Fleet,
    identity: Path,
    release: ChartRelease,
    options: ScaleOptions,
    work: Path,
    progress: Progress,
) -> ShardRun:
    """Replicas with the chart's sharding share the fleet; one is killed, its shards move,
    and a service of a moved shard is edited. Who wrote what comes from the audit log."""
    count, shards = options.shard_replicas, options.shards
    progress(f"sharded: {count} replicas share {shards} shards; then one of them is killed")
    leases, names = _Leases(api, release), [f"shard-{i}" for i in range(count)]
    replicas = [
        OperatorProcess(
            identity,
            work / f"{name}.log",
            extra_args=_args(release, sharded=True),
            env={"POD_NAME": name, "POD_NAMESPACE": release.namespace},
        )
        for name in names
    ]
    start, started = time.time(), time.monotonic()
    deadline = started + options.timeout_s
    moved = edit = None
    try:
        for replica in replicas:
            replica.start(120.0)
        settled = _poll(lambda: _fair(leases.holders(), shards, names), started, deadline)
        total = options.services + options.burst
        # Every service edited: each replica writes the services of its shards.
        edited = settled is not None and fleet.edit_all(total, "47Gi", deadline)
        if edited:
            # The first replica is killed: it held every shard before the others came and
            # handed them theirs, so no survivor gets back a shard it once held, and a
            # service written by one replica, another, then the first again is two replicas
            # acting at once (see overlapping), not two handovers.
            victim = names[0]
            lost = {s for s, holder in leases.holders().items() if holder == victim}
            replicas[0].kill()
            killed = time.monotonic()
            moved = _poll(
                lambda: _fair(leases.holders(), shards, names[1:]), killed, killed + 120.0
            )
            # A service of a moved shard, from the whole fleet (a few services may all
            # hash elsewhere).
            of_service = fleet.shards(shards)
            index = next((i for i, s in sorted(of_service.items()) if s in lost), None)
            if moved is not None and index is not None:
                timed = fleet.edit(index, "48Gi", timeout_s=60.0)
                edit = timed.seen_s if timed is not None else None
                # And every service again, now by the replicas left.
                edited = fleet.edit_all(total, "46Gi", time.monotonic() + options.timeout_s)
    finally:
        for replica in replicas:
            replica.stop()
    time.sleep(2.0)  # requests answered at the end reach the log late
    writers = writers_by_service(
        audit.between(start, time.time()), {f"svc-{i}" for i in range(total)}
    )
    return ShardRun(
        replicas=count,
        shards=shards,
        lease_s=options.shard_lease_s,
        settled_s=settled,
        moved_s=moved,
        edit_after_move_s=edit,
        every_edit_applied=edited,
        writers=len({agent for agents in writers.values() for agent in agents}),
        services_written=len(writers),
        overlaps=overlapping(writers),
    )


def _at_rest(deployment: Mapping[str, Any]) -> bool:
    """Whether a Deployment's rollout of its own replicas is complete, as the operator
    judges one."""
    return rollout_complete(deployment, (deployment.get("spec") or {}).get("replicas", 1))


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
) -> tuple[float | None, list[_Edit], int]:
    """Create ``burst`` more services while editing the first ones, one edit at a time."""
    progress(f"burst: creating {options.burst} more services while editing existing ones")
    total = options.services + options.burst
    started = time.monotonic()
    creating = threading.Thread(
        target=fleet.create, args=(range(options.services, total),), daemon=True
    )
    creating.start()
    edits: list[_Edit] = []
    lost = 0
    for edit in range(options.edits):
        # The burst lasts until the operator has made every Deployment of it, not only
        # until the last creation was sent: its queue is full until then.
        if edit > 0 and not creating.is_alive() and fleet.deployments() >= total:
            break
        timed = fleet.edit(edit % options.services, f"{40 + edit % 50}Gi", timeout_s=60.0)
        if timed is None:
            lost += 1
        else:
            edits.append(timed)
        time.sleep(0.2)
    creating.join()
    created = fleet.wait_for(total, started, deadline)
    return created, edits, lost


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
    values: dict[str, Any] = {"operator": {"watchNamespaces": [_NAMESPACE]}}
    if options.shard_replicas:
        values["replicaCount"] = options.shard_replicas
        values["operator"]["sharding"] = {
            "shards": options.shards,
            "leaseSeconds": options.shard_lease_s,
        }
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
        components = _components(info)
        started, mark = time.monotonic(), _Mark.now(rss.pid, components)
        fleet.create(range(options.services))
        created = fleet.wait_for(options.services, started, started + options.timeout_s)
        created_by_timeout = fleet.deployments() if created is None else options.services
        creation = mark.load(audit, rss.pid, components, _limit(release))
        progress("settling: waiting until the fleet's pods run and each service has decided")
        pods = options.services * options.pods_per_service
        unsettled = fleet.settle(
            options.services, pods, time.monotonic() + options.timeout_s, _QUIET_S
        )
        steady, window = _steady(audit, options, progress)
        steady_rss = rss.last_mib
        mark = _Mark.now(rss.pid, components)
        burst_created, edits, lost = _burst_with_edits(
            fleet, options, time.monotonic() + options.timeout_s, progress
        )
        burst = mark.load(audit, rss.pid, components, _limit(release))
        slowest = _at_p99(edits, audit.between(mark.at, time.time()))
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
        operator.stop()
        sharded = (
            _sharded(api, audit, fleet, identity, release, options, work, progress)
            if options.shard_replicas
            else None
        )
    finally:
        operator.stop()
    return ScaleFigures(
        services=options.services,
        pods_per_service=options.pods_per_service,
        gpu_nodes=options.gpu_nodes,
        created_s=created,
        created_by_timeout=created_by_timeout,
        unsettled=unsettled,
        steady_window_s=window,
        steady_requests=len(steady),
        steady_writes=sum(1 for r in steady if r.writes),
        steady_by_kind=tuple(by_kind(steady)),
        rss_peak_mib=rss.peak_mib,
        rss_steady_mib=steady_rss,
        burst_services=options.burst,
        burst_created_s=burst_created,
        edit_latencies_s=tuple(e.seen_s for e in edits),
        edits_lost=lost,
        restart_converged_s=converged,
        restart_requests=restart_requests,
        memory_limit_mib=_chart_limit(release),
        shards=sharded,
        creation=creation,
        burst=burst,
        slowest_edit=slowest,
    )


def _at_p99(edits: list[_Edit], requests: list[AuditRequest]) -> EditPath | None:
    """Where the time of the edit at the p99 went (None without edits or its apply)."""
    if not edits:
        return None
    p99 = nearest_rank([e.seen_s for e in edits], 0.99)
    return next(e for e in edits if e.seen_s == p99).path(requests)


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
    if figures.shards is not None:
        plain["shards"]["overlaps"] = list(figures.shards.overlaps)
    return plain
