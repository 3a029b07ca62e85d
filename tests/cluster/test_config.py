"""Command lines, kubeconfigs and node manifests of the local cluster."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
import yaml

from specops.cluster._config import (
    GPU_RESOURCE,
    GPU_TAINT,
    Binaries,
    ClientCredentials,
    Ports,
    fake_node,
    kwok_config,
    render_kubeconfig,
    startup_waves,
)
from specops.cluster._layout import RunFiles

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
    node = fake_node("kwok-gpu-0", 8)
    assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert node["status"]["capacity"][GPU_RESOURCE] == "8"
    assert node["status"]["allocatable"][GPU_RESOURCE] == "8"
    assert node["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    assert node["spec"]["taints"] == [GPU_TAINT]


def test_cpu_node_has_no_gpus_and_no_taint() -> None:
    node = fake_node("kwok-cpu-0", 0)
    assert GPU_RESOURCE not in node["status"]["capacity"]
    assert "taints" not in node["spec"]
    assert "nvidia.com/gpu.present" not in node["metadata"]["labels"]


def test_kwok_config_is_one_stream_of_all_stages() -> None:
    docs = ("kind: Stage\nmetadata: {name: a}", "kind: Stage\nmetadata: {name: b}\n")
    loaded = list(yaml.safe_load_all(kwok_config(docs)))
    assert [d["metadata"]["name"] for d in loaded] == ["a", "b"]
