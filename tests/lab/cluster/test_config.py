"""Command lines, kubeconfigs, node manifests and kwok stages of the local cluster."""

from __future__ import annotations

import base64
import ipaddress
import re
from pathlib import Path
from typing import Any

import jq
import pytest
import yaml
from specops_lab.cluster._cluster import ClusterOptions
from specops_lab.cluster._config import (
    ENGINE_READY_ANNOTATION,
    GPU_RESOURCE,
    GPU_TAINT,
    LOOPBACK_CIDR,
    POD_BLOCKS,
    POD_CIDR_FALLBACK,
    SERVICE_CIDR,
    UNCLAIMED_READY_S,
    Binaries,
    ClientCredentials,
    Ports,
    fake_node,
    free_pod_block,
    kwok_config,
    node_pod_capacity,
    node_pod_cidr,
    render_kubeconfig,
    startup_waves,
)
from specops_lab.cluster._layout import RunFiles

from specops.errors import ClusterError

BINS = Binaries(*(Path(f"/opt/{n}") for n in ("etcd", "apiserver", "kcm", "scheduler", "kwok")))
PORTS = Ports(41001, 41002, 41003, 41004, 41005, 41006)


def _flat(tmp_path: Path) -> list[tuple[str, ...]]:
    waves = startup_waves(BINS, RunFiles(tmp_path), PORTS)
    return [c.argv for wave in waves for c in wave]


def test_waves_start_etcd_then_apiserver_then_its_clients(tmp_path: Path) -> None:
    waves = startup_waves(BINS, RunFiles(tmp_path), PORTS)
    names = [[c.name for c in wave] for wave in waves]
    assert names == [
        ["etcd"],
        ["kube-apiserver"],
        ["kube-controller-manager", "kube-scheduler", "kwok"],
    ]


def test_every_port_on_a_command_line_is_one_of_the_chosen_ports(tmp_path: Path) -> None:
    chosen = {str(p) for p in vars(PORTS).values()}
    for argv in _flat(tmp_path):
        for port in re.findall(r"127\.0\.0\.1:(\d+)", " ".join(argv)):
            assert port in chosen, argv[0]
        assert not any(a.startswith("--bind-address=0.0.0.0") for a in argv)


def test_health_urls_use_each_components_own_port(tmp_path: Path) -> None:
    urls = {
        c.name: c.health_url
        for wave in startup_waves(BINS, RunFiles(tmp_path), PORTS)
        for c in wave
    }
    assert urls == {
        "etcd": "http://127.0.0.1:41001/health",
        "kube-apiserver": "https://127.0.0.1:41003/readyz",
        "kube-controller-manager": "https://127.0.0.1:41004/healthz",
        "kube-scheduler": "https://127.0.0.1:41005/healthz",
        "kwok": "http://127.0.0.1:41006/healthz",
    }


def test_apiserver_runs_rbac_and_the_gpu_toleration_admission(tmp_path: Path) -> None:
    apiserver = _flat(tmp_path)[1]
    assert "--authorization-mode=Node,RBAC" in apiserver
    assert "--enable-admission-plugins=ExtendedResourceToleration" in apiserver
    assert "--etcd-servers=http://127.0.0.1:41001" in apiserver
    assert "--watch-cache=false" in apiserver  # watches that etcd 3.4 can serve


def test_controller_manager_signs_tokens_and_uses_per_controller_identities(tmp_path: Path) -> None:
    files = RunFiles(tmp_path)
    kcm = _flat(tmp_path)[2]
    assert f"--service-account-private-key-file={files.service_account_key}" in kcm
    assert "--use-service-account-credentials=true" in kcm
    assert f"--kubeconfig={files.component_kubeconfig('kube-controller-manager')}" in kcm


def test_kwok_manages_only_annotated_nodes(tmp_path: Path) -> None:
    kwok = _flat(tmp_path)[4]
    assert "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" in kwok
    assert f"--config={RunFiles(tmp_path).kwok_config}" in kwok


def test_cert_kubeconfig_embeds_ca_and_client_cert() -> None:
    credentials = ClientCredentials(cert_pem=b"CERT", key_pem=b"KEY")
    config = yaml.safe_load(render_kubeconfig("https://127.0.0.1:1", b"CA", "alice", credentials))
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    assert cluster["server"] == "https://127.0.0.1:1"
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"CA"
    assert base64.b64decode(user["client-certificate-data"]) == b"CERT"
    assert base64.b64decode(user["client-key-data"]) == b"KEY"
    assert config["current-context"] == config["contexts"][0]["name"]


def test_token_kubeconfig_carries_the_token_only() -> None:
    text = render_kubeconfig("https://h:1", b"CA", "sa", ClientCredentials(token="t0k"))
    assert yaml.safe_load(text)["users"][0]["user"] == {"token": "t0k"}


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"token": "t", "cert_pem": b"c", "key_pem": b"k"}, {"cert_pem": b"c"}],
)
def test_credentials_need_exactly_one_method(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="either"):
        ClientCredentials(**kwargs)  # type: ignore[arg-type]


def test_gpu_node_has_gpus_labels_and_taint() -> None:
    node = fake_node("kwok-gpu-0", 8, "127.1.0.0/24")
    assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert node["status"]["capacity"][GPU_RESOURCE] == "8"
    assert node["status"]["allocatable"][GPU_RESOURCE] == "8"
    assert node["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    assert node["spec"]["taints"] == [GPU_TAINT]


def test_cpu_node_has_no_gpus_and_no_taint() -> None:
    node = fake_node("kwok-cpu-0", 0, "127.1.1.0/24")
    assert GPU_RESOURCE not in node["status"]["capacity"]
    assert "taints" not in node["spec"]
    assert "nvidia.com/gpu.present" not in node["metadata"]["labels"]


# The selectors of kwok's own pod stages (kustomize/stage/pod/fast), templates left out.
KWOK_POD_STAGES = (
    """
kind: Stage
metadata: {name: pod-ready}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
    - {key: .status.phase, operator: In, values: [Pending]}
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next: {statusTemplate: 'phase: Running'}
""",
    """
kind: Stage
metadata: {name: pod-delete}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: Exists}
  next: {delete: true}
""",
)


def _kwok_matches(expression: dict[str, Any], obj: dict[str, Any]) -> bool:
    """One match expression, evaluated as kwok does (pkg/utils/expression/selector.go): a
    jq query, where an error, no result or only nulls is absent and values compare as
    strings."""
    try:
        results = jq.compile(expression["key"]).input_value(obj).all()
    except ValueError:  # kwok reads a query that fails (iterating null) as absent
        results = []
    present = [r for r in results if r is not None]
    texts = {str(r).lower() if isinstance(r, bool) else str(r) for r in present}
    hit = bool(texts & set(expression.get("values", [])))
    return {
        "Exists": bool(present),
        "DoesNotExist": not present,
        "In": hit,
        "NotIn": not hit,
    }[expression["operator"]]


def _stages_for(obj: dict[str, Any]) -> list[str]:
    stages = yaml.safe_load_all(kwok_config(KWOK_POD_STAGES))
    return [
        stage["metadata"]["name"]
        for stage in stages
        if all(_kwok_matches(e, obj) for e in stage["spec"]["selector"]["matchExpressions"])
    ]


def _pod(
    *,
    served: bool = True,
    phase: str = "Pending",
    ready: str | None = None,
    engine: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "labels": {"app": "x"}}
    if served:
        metadata["labels"]["specops.io/service"] = "llama"
    if engine is not None:
        metadata["annotations"] = {ENGINE_READY_ANNOTATION: engine}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if ready is not None:
        status["conditions"] = [{"type": "Initialized", "status": "True"}]
        status["conditions"].append({"type": "Ready", "status": ready})
    return {"metadata": metadata, "spec": {"containers": []}, "status": status}


@pytest.mark.parametrize(
    ("pod", "stages"),
    [
        (_pod(served=False), ["pod-ready"]),
        (_pod(served=False, phase="Running", ready="True"), []),
        (_pod(served=False, deleting=True), ["pod-delete"]),
        (_pod(), ["specops-pod-unclaimed"]),
        (_pod(phase="Running", ready="True"), []),
        (_pod(engine="false"), ["specops-pod-start"]),
        (_pod(engine="true"), ["specops-pod-start"]),
        (_pod(phase="Running", ready="False", engine="false"), []),
        (_pod(phase="Running", ready="False", engine="true"), ["specops-engine-ready"]),
        (_pod(phase="Running", ready="True", engine="true"), []),
        (_pod(phase="Running", ready="True", engine="false"), ["specops-engine-unready"]),
        (_pod(phase="Running", ready="True", deleting=True), ["pod-delete"]),
        # A claimed pod is the runner's to delete for good, once its processes have stopped.
        (
            _pod(phase="Running", ready="True", engine="true", deleting=True),
            ["specops-pod-delete-claimed"],
        ),
        (_pod(engine="false", deleting=True), ["specops-pod-delete-claimed"]),
    ],
)
def test_claimed_served_pods_are_ready_only_while_their_engine_is(
    pod: dict[str, Any], stages: list[str]
) -> None:
    assert _stages_for(pod) == stages


def test_only_the_fallbacks_for_pods_no_runner_handles_wait() -> None:
    delays = {
        s["metadata"]["name"]: s["spec"]["delay"]
        for s in yaml.safe_load_all(kwok_config(KWOK_POD_STAGES))
        if s["metadata"]["name"].startswith("specops-")
    }
    assert delays.pop("specops-pod-unclaimed") == {"durationMilliseconds": UNCLAIMED_READY_S * 1000}
    # The kubelet's deadline: the end of the grace period, which the API server wrote.
    assert delays.pop("specops-pod-delete-claimed") == {
        "durationFrom": {"expressionFrom": ".metadata.deletionTimestamp"}
    }
    assert list(delays.values()) == [{"durationMilliseconds": 0}] * 3


def test_served_pod_stages_start_running_then_follow_readiness() -> None:
    by_name = {s["metadata"]["name"]: s for s in yaml.safe_load_all(kwok_config(KWOK_POD_STAGES))}
    flags = {
        name: by_name[name]["spec"]["next"]["statusTemplate"].splitlines()[0]
        for name in by_name
        if name.startswith("specops-") and "statusTemplate" in by_name[name]["spec"]["next"]
    }
    assert flags == {
        "specops-pod-unclaimed": "{{ $start := true }}{{ $ready := true }}",
        "specops-pod-start": "{{ $start := true }}{{ $ready := false }}",
        "specops-engine-ready": "{{ $start := false }}{{ $ready := true }}",
        "specops-engine-unready": "{{ $start := false }}{{ $ready := false }}",
    }


def test_kwok_config_is_one_stream_of_all_stages() -> None:
    loaded = list(
        yaml.safe_load_all(kwok_config(("kind: Stage\nmetadata: {name: a}", *KWOK_POD_STAGES)))
    )
    assert [d["metadata"]["name"] for d in loaded] == [
        "a",
        "pod-ready",
        "pod-delete",
        "specops-pod-unclaimed",
        "specops-pod-start",
        "specops-engine-ready",
        "specops-engine-unready",
        "specops-pod-delete-claimed",
    ]


@pytest.mark.parametrize("missing", ["pod-ready", "pod-delete"])
def test_kwok_config_without_one_of_kwoks_pod_stages_is_refused(missing: str) -> None:
    kept = tuple(s for s in KWOK_POD_STAGES if f"name: {missing}}}" not in s)
    with pytest.raises(ClusterError, match=f"no '{missing}' stage"):
        kwok_config(("kind: Stage\nmetadata: {name: a}", *kept))


def _addresses(argv: tuple[str, ...]) -> list[str]:
    """Every IP address or CIDR on a command line."""
    return re.findall(r"\b\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?\b", " ".join(argv))


def test_every_address_and_range_of_the_cluster_is_on_loopback_but_the_service_range(
    tmp_path: Path,
) -> None:
    loopback = ipaddress.IPv4Network(LOOPBACK_CIDR)
    ranges = [a for argv in _flat(tmp_path) for a in _addresses(argv)]
    nodes = ClusterOptions(gpu_nodes=64, cpu_nodes=2).node_manifests(pod_block=253)
    ranges += [cidr for node in nodes for cidr in node["spec"]["podCIDRs"]]
    ranges.append(POD_CIDR_FALLBACK)
    # The ClusterIP range is the API server's to allocate from and is never dialled.
    off = {r for r in ranges if not ipaddress.IPv4Network(r, strict=False).subnet_of(loopback)}
    assert off == {SERVICE_CIDR}
    assert "--cidr=" + POD_CIDR_FALLBACK in _flat(tmp_path)[4]
    assert "--node-ip=127.0.0.1" in _flat(tmp_path)[4]


def test_each_node_hands_out_pod_ips_from_a_range_of_its_own() -> None:
    nodes = ClusterOptions(gpu_nodes=3, cpu_nodes=1).node_manifests(pod_block=0)
    cidrs = [node["spec"]["podCIDR"] for node in nodes]
    assert cidrs == ["127.1.0.0/24", "127.1.1.0/24", "127.1.2.0/24", "127.1.3.0/24"]
    assert [node["spec"]["podCIDRs"] for node in nodes] == [[c] for c in cidrs]
    networks = [ipaddress.ip_network(c) for c in [*cidrs, POD_CIDR_FALLBACK]]
    assert not any(a.overlaps(b) for i, a in enumerate(networks) for b in networks[i + 1 :])
    with pytest.raises(ClusterError, match="at most 256 fake nodes, got 257"):
        node_pod_cidr(0, 256)


def test_clusters_side_by_side_never_share_a_pod_address() -> None:
    first = ClusterOptions(gpu_nodes=64, cpu_nodes=2).node_manifests(pod_block=0)
    second = ClusterOptions(gpu_nodes=64, cpu_nodes=2).node_manifests(pod_block=1)
    ranges = [ipaddress.ip_network(n["spec"]["podCIDR"]) for n in (*first, *second)]
    assert not any(a.overlaps(b) for i, a in enumerate(ranges) for b in ranges[i + 1 :])
    assert not any(r.overlaps(ipaddress.ip_network(POD_CIDR_FALLBACK)) for r in ranges)
    assert node_pod_cidr(POD_BLOCKS - 1, 255) == "127.254.255.0/24"
    with pytest.raises(ClusterError, match="block is 0 to 253, got 254"):
        node_pod_cidr(POD_BLOCKS, 0)


def test_a_cluster_takes_the_lowest_block_no_running_cluster_holds() -> None:
    assert free_pod_block(set()) == 0
    assert free_pod_block({0, 1, 3}) == 2
    with pytest.raises(ClusterError, match="all 254 pod-address blocks are held"):
        free_pod_block(set(range(POD_BLOCKS)))


def test_a_node_takes_no_more_pods_than_its_range_has_addresses() -> None:
    assert node_pod_capacity(8) == 110
    assert node_pod_capacity(238) == 254
    with pytest.raises(ClusterError, match="239 GPUs per node would need 255"):
        node_pod_capacity(239)
