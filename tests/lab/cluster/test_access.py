"""Kubeconfigs for restricted identities."""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from specops_lab.cluster._access import _current_cluster, user_kubeconfig
from specops_lab.cluster._layout import RunFiles
from specops_lab.cluster._pki import new_ca

from specops.errors import ClusterError


def test_user_kubeconfig_carries_user_and_groups(tmp_path: Path) -> None:
    files = RunFiles(tmp_path)
    files.pki.mkdir()
    ca = new_ca("ca", dt.datetime.now(dt.UTC))
    files.ca_cert.write_bytes(ca.cert_pem)
    files.ca_key.write_bytes(ca.key_pem)
    text = user_kubeconfig(files, "https://127.0.0.1:9", "operator", ("specops:operators",))
    config = yaml.safe_load(text)
    pem = base64.b64decode(config["users"][0]["user"]["client-certificate-data"])
    subject = x509.load_pem_x509_certificate(pem).subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "operator"
    assert subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "specops:operators"
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:9"


def test_user_kubeconfig_without_a_cluster_says_so(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="is the cluster up"):
        user_kubeconfig(RunFiles(tmp_path), "https://127.0.0.1:9", "u")


def test_current_cluster_reads_the_current_context() -> None:
    config = {
        "current-context": "b",
        "contexts": [
            {"name": "a", "context": {"cluster": "x"}},
            {"name": "b", "context": {"cluster": "y"}},
        ],
        "clusters": [
            {"name": "x", "cluster": {"server": "https://x", "certificate-authority-data": "QQ=="}},
            {"name": "y", "cluster": {"server": "https://y", "certificate-authority-data": "Qg=="}},
        ],
    }
    assert _current_cluster(config, Path("k")) == ("https://y", b"B")


def test_current_cluster_without_embedded_ca_names_the_key() -> None:
    config = {
        "current-context": "a",
        "contexts": [{"name": "a", "context": {"cluster": "x"}}],
        "clusters": [{"name": "x", "cluster": {"server": "https://x"}}],
    }
    with pytest.raises(ClusterError, match="certificate-authority-data"):
        _current_cluster(config, Path("k"))
