"""A local Kubernetes control plane built from the real components, for e2e tests and the demo.

kube-apiserver, kube-controller-manager and kube-scheduler are built from the Go
modules of ``k8s.io/kubernetes`` and cached by version outside the repository; etcd
comes from the system; kwok plays the nodes (fake GPU nodes whose pods become Ready;
the pods of a SpeculativeService only once the pod runner says their engine answers).
"""

from specops_lab.cluster._access import service_account_kubeconfig, user_kubeconfig
from specops_lab.cluster._build import ensure_binaries, find_etcd, find_go
from specops_lab.cluster._cluster import (
    ClusterInfo,
    ClusterOptions,
    ClusterStatus,
    ComponentStatus,
    LocalCluster,
    prune_killed_runs,
    running_cluster,
)
from specops_lab.cluster._config import (
    ENGINE_READY_ANNOTATION,
    GPU_RESOURCE,
    GPU_TAINT,
    KWOK_NODE_ANNOTATION,
    SERVED_POD_LABEL,
    SERVICE_CIDR,
)
from specops_lab.cluster._layout import CacheLayout, RunFiles, Versions
from specops_lab.cluster._process import free_ports, spawn

__all__ = [
    "ENGINE_READY_ANNOTATION",
    "GPU_RESOURCE",
    "GPU_TAINT",
    "KWOK_NODE_ANNOTATION",
    "SERVED_POD_LABEL",
    "SERVICE_CIDR",
    "CacheLayout",
    "ClusterInfo",
    "ClusterOptions",
    "ClusterStatus",
    "ComponentStatus",
    "LocalCluster",
    "RunFiles",
    "Versions",
    "ensure_binaries",
    "find_etcd",
    "find_go",
    "free_ports",
    "prune_killed_runs",
    "running_cluster",
    "service_account_kubeconfig",
    "spawn",
    "user_kubeconfig",
]
