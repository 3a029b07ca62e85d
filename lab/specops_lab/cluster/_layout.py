"""Where the control plane's builds and running clusters live on disk.

Builds are cached by version outside the repository (``~/.cache/specops`` or
``$SPECOPS_CACHE``) so that every checkout and every CI step on a machine shares one
build. A running cluster keeps its certificates, kubeconfigs, logs, etcd data and
process table in a run directory of its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specops.cache import cache_root

__all__ = ["KUBE_BINARIES", "CacheLayout", "RunFiles", "Versions"]

KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass(frozen=True)
class Versions:
    """The component versions a cluster is built from."""

    kubernetes: str = "v1.36.3"
    kwok: str = "v0.8.0"


@dataclass(frozen=True)
class CacheLayout:
    """The cache directory tree, one folder per component and version."""

    root: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> CacheLayout:
        """Rooted at :func:`specops.cache.cache_root`."""
        return cls(cache_root(env))

    def kubernetes(self, version: str) -> Path:
        return self.root / "k8s" / version

    def kwok(self, version: str) -> Path:
        return self.root / "kwok" / version

    def run(self, name: str) -> Path:
        return self.root / "run" / name


@dataclass(frozen=True)
class RunFiles:
    """The files of one running cluster, all under its run directory."""

    dir: Path

    @property
    def pki(self) -> Path:
        return self.dir / "pki"

    @property
    def ca_cert(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.pki / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.pki / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.pki / "apiserver.key"

    @property
    def service_account_key(self) -> Path:
        return self.pki / "sa.key"

    @property
    def service_account_public_key(self) -> Path:
        return self.pki / "sa.pub"

    @property
    def etcd_data(self) -> Path:
        return self.dir / "etcd"

    @property
    def kwok_config(self) -> Path:
        return self.dir / "kwok.yaml"

    @property
    def audit_policy(self) -> Path:
        return self.dir / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: one JSON event per request of a ServiceAccount outside
        kube-system (an operator's), so a benchmark counts exactly what the operator asked."""
        return self.dir / "logs" / "audit.jsonl"

    @property
    def state(self) -> Path:
        return self.dir / "state.json"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig handed to users, kubectl and the tests."""
        return self.dir / "kubeconfig"

    def component_kubeconfig(self, component: str) -> Path:
        return self.dir / f"{component}.kubeconfig"

    def log(self, component: str) -> Path:
        return self.dir / "logs" / f"{component}.log"
