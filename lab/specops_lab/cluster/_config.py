"""Command lines, kubeconfigs and manifests of the local control plane, as plain data.

Nothing here starts a process or touches the network: the process shell in
``_cluster.py`` writes these out and runs them, and the unit tests read them.

GPU node policy: fake GPU nodes carry the taint ``nvidia.com/gpu=present:NoSchedule``
(the convention of managed GPU node pools) and the API server runs the
``ExtendedResourceToleration`` admission plugin, which gives every pod that requests
``nvidia.com/gpu`` the matching toleration. GPU pods therefore land on GPU nodes with
no kwok-specific toleration in their spec, and pods without GPUs go to the untainted
CPU node.

Pod readiness: kwok's own ``pod-ready`` stage marks a pod Ready as soon as it is
scheduled. Pods labelled ``specops.io/service`` run a (simulated) engine that takes a
while to load, and a real kubelet holds them back by their startup and readiness probes
on ``/health``; without that, a rolling update deletes the old pods before the new
engines answer and the service has no capacity. So those pods are left to stages of
our own (:func:`served_pod_stages`): a pod the pod runner claims starts Running and not
Ready, and its Ready condition then follows the ``specops.io/engine-ready`` annotation,
which the runner sets from its probes. Every other pod keeps kwok's behaviour.

Addresses: everything is on loopback (127.0.0.0/8), so nothing that dials a node or a pod
leaves the machine. Each fake node gets its own ``spec.podCIDR`` (:func:`node_pod_cidr`),
from which kwok hands out its pods' IPs, and every node's address is 127.0.0.1; the pod
runner serves each pod's engine and sidecar on the pod's own IP. Each cluster running on
the machine holds a block of its own (:func:`free_pod_block`), so two clusters side by side
never give two pods one address (one's engine would answer for the other's). The one range
off loopback is the Service ClusterIP range (``SERVICE_CIDR``): the API server wants a range it
can allocate from, and nothing dials a ClusterIP here (the pod runner's per-service proxy
stands in for Services; no kube-proxy runs).

Deletion: a claimed served pod stays Terminating, as on a real node, until the pod runner
has stopped its processes and deletes it for good (kwok's ``pod-delete`` stage is left to
every other pod, and to a served pod nobody claimed). So kwok recycles a pod's IP only when
nothing listens on it any more, and a new pod never gets the address of one still draining.
"""

from __future__ import annotations

import base64
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specops.errors import ClusterError
from specops_lab.cluster._layout import RunFiles

__all__ = [
    "ENGINE_READY_ANNOTATION",
    "GPU_RESOURCE",
    "GPU_TAINT",
    "KWOK_NODE_ANNOTATION",
    "LOOPBACK_CIDR",
    "POD_BLOCKS",
    "POD_CIDR_FALLBACK",
    "SERVED_POD_LABEL",
    "SERVICE_CIDR",
    "UNCLAIMED_READY_S",
    "Binaries",
    "ClientCredentials",
    "Component",
    "Ports",
    "fake_node",
    "free_pod_block",
    "kwok_config",
    "node_pod_capacity",
    "node_pod_cidr",
    "render_kubeconfig",
    "served_pod_stages",
    "startup_waves",
]

LOOPBACK = "127.0.0.1"
LOOPBACK_CIDR = "127.0.0.0/8"
# ClusterIPs: allocated by the API server, never dialled here (see the module docstring).
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
# Pod IPs for a node without its own podCIDR (kwok's --cidr; its default is 10.0.0.1/24).
POD_CIDR_FALLBACK = "127.255.0.0/16"
# Pod-address blocks 127.1-254.x.x, one per cluster; a node's range is a /24 in its block.
POD_BLOCKS = 254
_MAX_NODES = 256
_POD_RANGE_SIZE = 254
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SERVED_POD_LABEL = "specops.io/service"
ENGINE_READY_ANNOTATION = "specops.io/engine-ready"
# How long a served pod waits for a pod runner to claim it before kwok makes it Ready anyway;
# a runner claims within a poll or two (about a second).
UNCLAIMED_READY_S = 5.0
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
_NODE_LEASE_SECONDS = 40
_CONTROLLERS = (
    "*",
    "-endpoints-controller",
    "-endpointslice-controller",
    "-endpointslice-mirroring-controller",
)


@dataclass(frozen=True)
class Binaries:
    """Paths of the executables a cluster runs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path


@dataclass(frozen=True)
class Ports:
    """Loopback ports chosen free at start; never fixed, so clusters can coexist."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.apiserver}"


@dataclass(frozen=True)
class Component:
    """One process of the control plane and the URL that says it is healthy."""

    name: str
    argv: tuple[str, ...]
    health_url: str


@dataclass(frozen=True)
class ClientCredentials:
    """How a kubeconfig user authenticates: a client certificate, or a bearer token."""

    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        has_cert = self.cert_pem is not None and self.key_pem is not None
        if has_cert == (self.token is not None):
            raise ValueError("give either cert_pem and key_pem, or token")


def _etcd(bins: Binaries, files: RunFiles, ports: Ports) -> Component:
    client = f"http://{LOOPBACK}:{ports.etcd_client}"
    peer = f"http://{LOOPBACK}:{ports.etcd_peer}"
    argv = (
        str(bins.etcd),
        "--name=specops",
        f"--data-dir={files.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=specops={peer}",
        "--auto-compaction-retention=1",
        "--logger=zap",
        "--log-level=warn",
    )
    return Component("etcd", argv, f"{client}/health")


def _apiserver(bins: Binaries, files: RunFiles, ports: Ports) -> Component:
    argv = (
        str(bins.kube_apiserver),
        f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={files.serving_cert}",
        f"--tls-private-key-file={files.serving_key}",
        f"--client-ca-file={files.ca_cert}",
        f"--service-account-key-file={files.service_account_public_key}",
        f"--service-account-signing-key-file={files.service_account_key}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # Left to itself the API server advertises the machine's own address in the
        # `kubernetes` Endpoints (it will not write a loopback one): none is written.
        f"--advertise-address={LOOPBACK}",
        "--endpoint-reconciler-type=none",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=ExtendedResourceToleration",
        "--allow-privileged=true",
        f"--cert-dir={files.pki / 'kube-apiserver'}",
        "--profiling=false",
        # etcd 3.4 lacks RequestWatchProgress, so the watch cache ends the streaming watches
        # of client-go 0.36 (kwok) with an error; kwok then saw pod deletions only on its
        # relists, and each rolling update stalled for half a minute. Serve watches from etcd.
        "--watch-cache=false",
        f"--audit-policy-file={files.audit_policy}",
        f"--audit-log-path={files.audit_log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=200",
        "--audit-log-maxbackup=1",
        # Written as they come: a reader counts the requests of the last second.
        "--audit-log-mode=blocking",
    )
    return Component("kube-apiserver", argv, f"{ports.server}/readyz")


def audit_policy() -> str:
    """The API server's audit policy: the requests of ServiceAccounts outside kube-system
    (the operator's, the pod runner's) at Metadata level, once each when answered; nothing of
    the control plane's own components, of kwok's nodes or of the admin."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [
            {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
            {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
            {"level": "None"},
        ],
    }
    return yaml.safe_dump(policy, sort_keys=False)


def _delegating(files: RunFiles, name: str) -> tuple[str, ...]:
    """Flags shared by controller-manager and scheduler: identity, delegated auth, own certs."""
    kubeconfig = files.component_kubeconfig(name)
    return (
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--cert-dir={files.pki / name}",
        "--leader-elect=false",
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        "--profiling=false",
    )


def _controller_manager(bins: Binaries, files: RunFiles, ports: Ports) -> Component:
    argv = (
        str(bins.kube_controller_manager),
        *_delegating(files, "kube-controller-manager"),
        f"--secure-port={ports.controller_manager}",
        f"--root-ca-file={files.ca_cert}",
        f"--service-account-private-key-file={files.service_account_key}",
        "--use-service-account-credentials=true",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # Nothing routes a Service here (no kube-proxy: the pod runner's proxy stands in),
        # and the API server refuses endpoints on loopback, where every pod is.
        f"--controllers={','.join(_CONTROLLERS)}",
    )
    url = f"https://{LOOPBACK}:{ports.controller_manager}/healthz"
    return Component("kube-controller-manager", argv, url)


def _scheduler(bins: Binaries, files: RunFiles, ports: Ports) -> Component:
    argv = (
        str(bins.kube_scheduler),
        *_delegating(files, "kube-scheduler"),
        f"--secure-port={ports.scheduler}",
    )
    return Component("kube-scheduler", argv, f"https://{LOOPBACK}:{ports.scheduler}/healthz")


def _kwok(bins: Binaries, files: RunFiles, ports: Ports) -> Component:
    key, value = KWOK_NODE_ANNOTATION
    argv = (
        str(bins.kwok),
        f"--kubeconfig={files.component_kubeconfig('kwok')}",
        f"--config={files.kwok_config}",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--node-ip={LOOPBACK}",
        f"--cidr={POD_CIDR_FALLBACK}",
        f"--node-port={ports.kwok}",
        f"--server-address={LOOPBACK}:{ports.kwok}",
        f"--node-lease-duration-seconds={_NODE_LEASE_SECONDS}",
    )
    return Component("kwok", argv, f"http://{LOOPBACK}:{ports.kwok}/healthz")


def startup_waves(
    bins: Binaries, files: RunFiles, ports: Ports
) -> tuple[tuple[Component, ...], ...]:
    """Every process of the cluster in waves: each wave starts once the one before is healthy.

    etcd, then the API server, then its three clients together. Stop in reverse.
    """
    waves = ((_etcd,), (_apiserver,), (_controller_manager, _scheduler, _kwok))
    return tuple(tuple(build(bins, files, ports) for build in wave) for wave in waves)


def render_kubeconfig(server: str, ca_pem: bytes, user: str, credentials: ClientCredentials) -> str:
    """A self-contained kubeconfig (certificates embedded) for one user of one cluster."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    auth: dict[str, str]
    if credentials.token is not None:
        auth = {"token": credentials.token}
    else:
        assert credentials.cert_pem is not None and credentials.key_pem is not None
        auth = {
            "client-certificate-data": b64(credentials.cert_pem),
            "client-key-data": b64(credentials.key_pem),
        }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "specops",
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [{"name": user, "user": auth}],
        "contexts": [{"name": user, "context": {"cluster": "specops", "user": user}}],
        "current-context": user,
    }
    return yaml.safe_dump(config, sort_keys=False)


_KWOK_POD_READY = "pod-ready"
_KWOK_POD_DELETE = "pod-delete"
_SERVED = {"key": f'.metadata.labels["{SERVED_POD_LABEL}"]', "operator": "Exists"}
_NOT_SERVED = {**_SERVED, "operator": "DoesNotExist"}
_NOT_DELETING = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_READY_CONDITION = '.status.conditions.[] | select( .type == "Ready" ) | .status'
_ENGINE_READY = f'.metadata.annotations["{ENGINE_READY_ANNOTATION}"]'
# A pod the runner claimed (it wrote the annotation) is the runner's to start and to end.
_CLAIMED = {"key": _ENGINE_READY, "operator": "Exists"}
_UNCLAIMED = {**_CLAIMED, "operator": "DoesNotExist"}

# One status for every stage of a served pod, steered by $start (the pod leaves Pending:
# Initialized, addresses, phase, start time, as kwok's pod-ready sets them) and $ready
# (what the engine's probes said). containerStatuses is not merged by name, so each
# container is written whole; its startedAt stays the pod's start time.
_SERVED_POD_STATUS = """\
{{ $now := Now }}
{{ $started := or .status.startTime $now }}
conditions:
{{ if $start }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
{{ end }}
- lastTransitionTime: {{ $now | Quote }}
  reason: {{ if $ready }}""{{ else }}ContainersNotReady{{ end }}
  status: {{ if $ready }}"True"{{ else }}"False"{{ end }}
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  reason: {{ if $ready }}""{{ else }}ContainersNotReady{{ end }}
  status: {{ if $ready }}"True"{{ else }}"False"{{ end }}
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: {{ $ready }}
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $started | Quote }}
{{ end }}
{{ if $start }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
{{ end }}
"""


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (the templates) as literal blocks, for a readable file."""


def _literal_blocks(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    )


_BlockDumper.add_representer(str, _literal_blocks)


def _served_pod_stage(
    name: str,
    expressions: list[dict[str, Any]],
    *,
    start: bool,
    ready: bool,
    delay_s: float = 0.0,
) -> dict[str, Any]:
    flags = f"{{{{ $start := {str(start).lower()} }}}}{{{{ $ready := {str(ready).lower()} }}}}\n"
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [_SERVED, _NOT_DELETING, *expressions]},
            "delay": {"durationMilliseconds": round(delay_s * 1000)},
            "next": {"statusTemplate": flags + _SERVED_POD_STATUS},
        },
    }


def served_pod_stages() -> tuple[dict[str, Any], ...]:
    """kwok Stages for pods labelled ``specops.io/service``, whose readiness the pod runner
    reports in the ``specops.io/engine-ready`` annotation, as a readiness probe would.

    The runner claims each pod it runs by writing "false" at once; a claimed pod starts
    Running and not Ready, and is Ready while the annotation says "true". A pod nobody
    claims within ``UNCLAIMED_READY_S`` (no runner: the operator's own e2e tests, which
    run no engines) becomes Ready as kwok's own stage would have made it. kwok replaces a
    pod's pending delayed stage when a change makes another stage match, so a claim in
    time cancels that fallback.
    """
    pending = {"key": ".status.phase", "operator": "In", "values": ["Pending"]}
    running = {"key": ".status.phase", "operator": "In", "values": ["Running"]}
    pod_ready = {"key": _READY_CONDITION, "operator": "In", "values": ["True"]}

    def engine(value: str) -> dict[str, Any]:
        return {"key": _ENGINE_READY, "operator": "In", "values": [value]}

    return (
        _served_pod_stage(
            "specops-pod-unclaimed",
            [pending, _UNCLAIMED],
            start=True,
            ready=True,
            delay_s=UNCLAIMED_READY_S,
        ),
        _served_pod_stage("specops-pod-start", [pending, _CLAIMED], start=True, ready=False),
        _served_pod_stage(
            "specops-engine-ready",
            [running, engine("true"), {**pod_ready, "operator": "NotIn"}],
            start=False,
            ready=True,
        ),
        _served_pod_stage(
            "specops-engine-unready",
            [running, engine("false"), pod_ready],
            start=False,
            ready=False,
        ),
    )


def _with_expressions(stage: dict[str, Any], *expressions: dict[str, Any]) -> dict[str, Any]:
    """``stage`` matching only the objects that also satisfy ``expressions``."""
    selector = stage["spec"].get("selector", {})
    matched = [*selector.get("matchExpressions", []), *expressions]
    spec = {**stage["spec"], "selector": {**selector, "matchExpressions": matched}}
    return {**stage, "spec": spec}


def _claimed_pod_delete(kwok_delete: dict[str, Any]) -> dict[str, Any]:
    """kwok's ``pod-delete`` for the pods a runner claimed, held until the pod's grace period
    ends (its deletionTimestamp): the runner deletes the pod for good as soon as its processes
    have stopped, and this is the kubelet's deadline should no runner be left to do it."""
    stage = _with_expressions(kwok_delete, _CLAIMED)
    delay = {"durationFrom": {"expressionFrom": ".metadata.deletionTimestamp"}}
    return {
        **stage,
        "metadata": {"name": "specops-pod-delete-claimed"},
        "spec": {**stage["spec"], "delay": delay},
    }


def kwok_config(stage_documents: tuple[str, ...]) -> str:
    """kwok's ``--config`` file: its Stage documents, one YAML stream, with kwok's
    ``pod-ready`` stage leaving the served pods to :func:`served_pod_stages` and its
    ``pod-delete`` stage leaving the pods a runner claimed to that runner."""
    stages = [yaml.safe_load(doc) for doc in stage_documents]
    names = [stage.get("metadata", {}).get("name") for stage in stages]
    by_name = dict(zip(names, stages, strict=True))
    for needed in (_KWOK_POD_READY, _KWOK_POD_DELETE):
        if needed not in by_name:
            raise ClusterError(
                f"kwok's stage configs have no {needed!r} stage (found {names}); "
                "the kwok version's kustomize/stage/pod/fast tree has changed"
            )
    narrowed = {_KWOK_POD_READY: _NOT_SERVED, _KWOK_POD_DELETE: _UNCLAIMED}
    adjusted = [
        _with_expressions(stage, narrowed[name]) if name in narrowed else stage
        for stage, name in zip(stages, names, strict=True)
    ]
    ours = [*served_pod_stages(), _claimed_pod_delete(by_name[_KWOK_POD_DELETE])]
    return yaml.dump_all([*adjusted, *ours], Dumper=_BlockDumper, sort_keys=False)


def free_pod_block(in_use: Collection[int]) -> int:
    """The lowest pod-address block no running cluster holds."""
    free = next((block for block in range(POD_BLOCKS) if block not in in_use), None)
    if free is None:
        raise ClusterError(
            f"all {POD_BLOCKS} pod-address blocks are held by running local clusters;"
            " stop one (`specops cluster down --name NAME`)"
        )
    return free


def node_pod_cidr(block: int, index: int) -> str:
    """The loopback range the pods of the ``index``-th fake node of the cluster holding
    pod-address ``block`` get their IPs from."""
    if not 0 <= block < POD_BLOCKS:
        raise ClusterError(f"a pod-address block is 0 to {POD_BLOCKS - 1}, got {block}")
    if not 0 <= index < _MAX_NODES:
        raise ClusterError(f"a local cluster has at most {_MAX_NODES} fake nodes, got {index + 1}")
    return f"127.{block + 1}.{index}.0/24"


def node_pod_capacity(gpus: int) -> int:
    """How many pods a fake node with ``gpus`` takes: room for one per GPU and its
    neighbours, within the addresses of its range."""
    pods = max(110, gpus + 16)
    if pods > _POD_RANGE_SIZE:
        raise ClusterError(
            f"a fake node has addresses for {_POD_RANGE_SIZE} pods; {gpus} GPUs per node"
            f" would need {pods}: spread the GPUs over more nodes"
        )
    return pods


def fake_node(name: str, gpus: int, pod_cidr: str) -> dict[str, Any]:
    """A kwok-managed Node whose pods get IPs from ``pod_cidr``; with ``gpus`` > 0 it looks
    like a GPU box (8-way by default, CPU and memory in proportion) and is tainted."""
    key, value = KWOK_NODE_ANNOTATION
    labels = {
        "type": "kwok",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
    }
    # An H100 box's share of the host per GPU (12 cores, 128 GiB), and room for its pods: a
    # node given more GPUs than a real box (to carry a large fleet) is not short of the rest.
    resources = {
        "cpu": str(max(96, 12 * gpus)),
        "memory": f"{max(1024, 128 * gpus)}Gi",
        "pods": str(node_pod_capacity(gpus)),
        "ephemeral-storage": "2Ti",
    }
    spec: dict[str, Any] = {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]}
    if gpus > 0:
        labels |= {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": str(gpus),
        }
        resources[GPU_RESOURCE] = str(gpus)
        spec["taints"] = [GPU_TAINT]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {key: value}},
        "spec": spec,
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }
