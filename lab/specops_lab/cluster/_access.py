"""Kubeconfigs for identities other than the admin, to run a program with limited rights.

The operator is meant to run with the RBAC its chart grants; these helpers give it
exactly that identity on a local cluster: a ServiceAccount token (TokenRequest API,
works on any cluster) or a client certificate signed by the local cluster's CA.
"""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path
from typing import Any

import yaml

from specops.errors import ClusterError
from specops_lab.cluster._config import ClientCredentials, render_kubeconfig
from specops_lab.cluster._layout import RunFiles
from specops_lab.cluster._pki import CertKey, issue_certificate

__all__ = ["service_account_kubeconfig", "user_kubeconfig"]


def user_kubeconfig(files: RunFiles, server: str, user: str, groups: tuple[str, ...] = ()) -> str:
    """A kubeconfig for ``user`` in ``groups``, with a client cert from the local cluster's CA."""
    try:
        ca = CertKey(files.ca_cert.read_bytes(), files.ca_key.read_bytes())
    except OSError as exc:
        raise ClusterError(f"no local cluster CA under {files.pki}: is the cluster up?") from exc
    pair = issue_certificate(ca, user, dt.datetime.now(dt.UTC), organizations=groups)
    credentials = ClientCredentials(cert_pem=pair.cert_pem, key_pem=pair.key_pem)
    return render_kubeconfig(server, ca.cert_pem, user, credentials)


def _current_cluster(kubeconfig: dict[str, Any], path: Path) -> tuple[str, bytes]:
    """Server URL and CA of the kubeconfig's current context (CA embedded as data)."""
    try:
        contexts = {c["name"]: c["context"] for c in kubeconfig["contexts"]}
        clusters = {c["name"]: c["cluster"] for c in kubeconfig["clusters"]}
        cluster = clusters[contexts[kubeconfig["current-context"]]["cluster"]]
        return cluster["server"], base64.b64decode(cluster["certificate-authority-data"])
    except (KeyError, TypeError) as exc:
        raise ClusterError(
            f"{path}: need a current-context whose cluster has server and"
            f" certificate-authority-data (missing {exc})"
        ) from exc


def service_account_kubeconfig(
    admin_kubeconfig: Path, namespace: str, name: str, *, expiration_seconds: int = 86400
) -> str:
    """A kubeconfig that acts as ServiceAccount ``namespace/name``, with a fresh bound token."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    loaded = yaml.safe_load(admin_kubeconfig.read_text())
    server, ca_pem = _current_cluster(loaded, admin_kubeconfig)
    api_client = config.new_client_from_config(config_file=str(admin_kubeconfig))  # type: ignore[no-untyped-call]
    spec = client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
    request = client.AuthenticationV1TokenRequest(spec=spec)
    try:
        response = client.CoreV1Api(api_client).create_namespaced_service_account_token(
            name, namespace, body=request
        )
    except ApiException as exc:
        raise ClusterError(
            f"could not get a token for ServiceAccount {namespace}/{name}:"
            f" {exc.status} {exc.reason} (does it exist?)"
        ) from exc
    if response.status is None:
        raise ClusterError(f"the API server returned no token for {namespace}/{name}")
    user = f"system:serviceaccount:{namespace}:{name}"
    return render_kubeconfig(server, ca_pem, user, ClientCredentials(token=response.status.token))
