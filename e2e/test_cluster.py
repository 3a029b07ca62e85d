"""The local control plane is a real one: API server, scheduler, controllers, kwok GPU nodes."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from specops_lab.cluster import (
    GPU_RESOURCE,
    SERVICE_CIDR,
    ClusterInfo,
    Versions,
    service_account_kubeconfig,
)

from e2e.harness import Kubectl, Wait, filled

pytestmark = pytest.mark.e2e


def _deployment(name: str, replicas: int, gpus: int) -> dict[str, Any]:
    """A Deployment manifest. The client's create methods send a dict as it is, though their
    types name only the models (hence the arg-type ignores where one is created)."""
    resources = {"limits": {GPU_RESOURCE: str(gpus)}} if gpus else {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "engine", "image": "vllm/vllm-openai", "resources": resources}
                    ]
                },
            },
        },
    }


def _ready(pod: client.V1Pod) -> bool:
    status = filled(pod.status)
    conditions = status.conditions or []
    return status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in conditions
    )


def test_api_server_reports_the_built_version(kubectl: Kubectl) -> None:
    version = json.loads(kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == Versions().kubernetes


def test_gpu_nodes_are_ready_with_gpu_capacity(api_client: client.ApiClient) -> None:
    nodes = client.CoreV1Api(api_client).list_node(label_selector="nvidia.com/gpu.present=true")
    assert len(nodes.items) >= 1
    for node in nodes.items:
        assert node.metadata is not None and node.metadata.annotations is not None
        assert node.status is not None and node.spec is not None
        assert node.status.capacity is not None and node.status.allocatable is not None
        assert node.status.conditions is not None and node.spec.taints is not None
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        assert node.status.capacity[GPU_RESOURCE] == "8"
        assert node.status.allocatable[GPU_RESOURCE] == "8"
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert [c.status for c in ready] == ["True"]
        assert [(t.key, t.effect) for t in node.spec.taints] == [(GPU_RESOURCE, "NoSchedule")]


def test_gpu_deployment_is_scheduled_becomes_ready_and_is_collected(
    api_client: client.ApiClient, namespace: str, wait: Wait
) -> None:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(namespace, _deployment("engine", replicas=3, gpus=2))  # type: ignore[arg-type]

    def pods() -> list[client.V1Pod]:
        return list(core.list_namespaced_pod(namespace, label_selector="app=engine").items)

    def rolled_out() -> bool:
        status = filled(apps.read_namespaced_deployment_status("engine", namespace).status)
        return status.ready_replicas == 3 and len(pods()) == 3

    wait(rolled_out, "3 ready replicas of the GPU deployment")
    gpu_nodes = {
        filled(n.metadata).name
        for n in core.list_node(label_selector="nvidia.com/gpu.present=true").items
    }
    for pod in pods():
        assert pod.spec is not None and pod.spec.tolerations is not None
        assert pod.status is not None and pod.status.conditions is not None
        assert _ready(pod)
        assert pod.spec.node_name in gpu_nodes
        tolerations = {(t.key, t.operator, t.effect) for t in pod.spec.tolerations}
        assert (GPU_RESOURCE, "Exists", "NoSchedule") in tolerations
        scheduled = [c for c in pod.status.conditions if c.type == "PodScheduled"]
        assert [c.status for c in scheduled] == ["True"]

    apps.delete_namespaced_deployment("engine", namespace)

    def collected() -> bool:
        replica_sets = apps.list_namespaced_replica_set(namespace).items
        return not replica_sets and not pods()

    wait(collected, "the garbage collector to remove the ReplicaSet and its pods")


def test_pods_without_gpus_avoid_the_gpu_nodes(
    api_client: client.ApiClient, namespace: str, wait: Wait
) -> None:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(namespace, _deployment("web", replicas=2, gpus=0))  # type: ignore[arg-type]

    def running() -> list[client.V1Pod]:
        return [p for p in core.list_namespaced_pod(namespace).items if _ready(p)]

    wait(lambda: len(running()) == 2, "2 ready pods without GPUs")
    assert {filled(p.spec).node_name for p in running()} == {"kwok-cpu-0"}


def _addresses(nodes: list[client.V1Node], pods: list[client.V1Pod]) -> set[str]:
    """Every address a node or pod advertises: node addresses and pod CIDRs, pod and host IPs."""
    found: set[str] = set()
    for node in nodes:
        spec = filled(node.spec)
        found |= {a.address for a in filled(node.status).addresses or []}
        found |= {cidr for cidr in (spec.pod_cidr, *(spec.pod_cidrs or [])) if cidr is not None}
    for pod in pods:
        status = filled(pod.status)
        found |= {ip for ip in (status.pod_ip, status.host_ip) if ip is not None}
        found |= {ip.ip for ip in (status.pod_ips or []) + (status.host_ips or [])}
    return found


def test_every_node_and_pod_address_is_on_loopback_and_services_have_no_endpoints(
    api_client: client.ApiClient, namespace: str, wait: Wait
) -> None:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    for name, gpus in (("engine", 1), ("web", 0)):
        apps.create_namespaced_deployment(namespace, _deployment(name, replicas=2, gpus=gpus))  # type: ignore[arg-type]
        service = client.V1Service(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1ServiceSpec(
                selector={"app": name}, ports=[client.V1ServicePort(port=8000)]
            ),
        )
        core.create_namespaced_service(namespace, service)

    def running() -> list[client.V1Pod]:
        return [p for p in core.list_namespaced_pod(namespace).items if _ready(p)]

    wait(lambda: len(running()) == 4, "4 ready pods, on GPU and CPU nodes")
    pod_ips = {filled(filled(p.status).pod_ip) for p in running()}
    assert len(pod_ips) == 4
    nodes = core.list_node().items
    by_node = {
        filled(n.metadata).name: ipaddress.ip_network(filled(filled(n.spec).pod_cidr))
        for n in nodes
    }
    for pod in running():
        assert pod.status is not None and pod.status.pod_ip is not None and pod.spec is not None
        assert ipaddress.ip_address(pod.status.pod_ip) in by_node[pod.spec.node_name]
    loopback = ipaddress.IPv4Network("127.0.0.0/8")
    seen = _addresses(nodes, core.list_pod_for_all_namespaces().items)
    assert pod_ips <= seen
    off = {a for a in seen if not ipaddress.IPv4Network(a, strict=False).subnet_of(loopback)}
    assert off == set()
    # ClusterIPs are allocated, never dialled: nothing here routes a Service.
    services = core.list_namespaced_service(namespace).items
    assert all(
        ipaddress.ip_address(filled(filled(s.spec).cluster_ip))
        in ipaddress.ip_network(SERVICE_CIDR)
        for s in services
    )
    assert not client.DiscoveryV1Api(api_client).list_endpoint_slice_for_all_namespaces().items
    assert not [e for e in core.list_endpoints_for_all_namespaces().items if e.subsets]


def test_service_account_identity_is_bound_by_rbac(
    cluster: ClusterInfo, kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    kubectl("create", "serviceaccount", "operator", "-n", namespace)
    restricted = tmp_path / "operator.kubeconfig"
    restricted.write_text(service_account_kubeconfig(cluster.kubeconfig, namespace, "operator"))

    def can_list_pods() -> str:
        args = ("--kubeconfig", str(restricted), "auth", "can-i", "list", "pods", "-n", namespace)
        return kubectl(*args, check=False).stdout.strip()

    assert can_list_pods() == "no"
    kubectl("create", "role", "reader", "--verb=list", "--resource=pods", "-n", namespace)
    kubectl(
        "create",
        "rolebinding",
        "reader",
        "--role=reader",
        f"--serviceaccount={namespace}:operator",
        "-n",
        namespace,
    )
    assert can_list_pods() == "yes"
