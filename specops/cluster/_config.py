"""Command lines, kubeconfigs and manifests of the local control plane, as plain data.

Nothing here starts a process or touches the network: the process shell in
``_cluster.py`` writes these out and runs them, and the unit tests read them.

GPU node policy: fake GPU nodes carry the taint ``nvidia.com/gpu=present:NoSchedule``
(the convention of managed GPU node pools) and the API server runs the
``ExtendedResourceToleration`` admission plugin, which gives every pod that requests
``nvidia.com/gpu`` the matching toleration. GPU pods therefore land on GPU nodes with
no kwok-specific toleration in their spec, and pods without GPUs go to the untainted
CPU node.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specops.cluster._layout import RunFiles

__all__ = [
    "GPU_RESOURCE",
    "GPU_TAINT",
    "KWOK_NODE_ANNOTATION",
    "SERVICE_CIDR",
    "Binaries",
    "ClientCredentials",
    "Component",
    "Ports",
    "fake_node",
    "kwok_config",
    "render_kubeconfig",
    "startup_waves",
]

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
_NODE_LEASE_SECONDS = 40


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
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=ExtendedResourceToleration",
        "--allow-privileged=true",
        f"--cert-dir={files.pki / 'kube-apiserver'}",
        "--profiling=false",
        # etcd 3.4 lacks RequestWatchProgress, so the watch cache ends the streaming watches
        # of client-go 0.36 (kwok) with an error; kwok then saw pod deletions only on its
        # relists, and each rolling update stalled for half a minute. Serve watches from etcd.
        "--watch-cache=false",
    )
    return Component("kube-apiserver", argv, f"{ports.server}/readyz")


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


def kwok_config(stage_documents: tuple[str, ...]) -> str:
    """kwok's ``--config`` file: its Stage documents, one YAML stream."""
    return "---\n".join(doc if doc.endswith("\n") else doc + "\n" for doc in stage_documents)


def fake_node(name: str, gpus: int) -> dict[str, Any]:
    """A kwok-managed Node; with ``gpus`` > 0 it looks like an 8-way GPU box and is tainted."""
    key, value = KWOK_NODE_ANNOTATION
    labels = {
        "type": "kwok",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
    }
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", "ephemeral-storage": "2Ti"}
    spec: dict[str, Any] = {}
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
