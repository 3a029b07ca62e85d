"""The specops chart installed with the Helm library (helm-python-sdk), for the demo and the
end-to-end tests, and a kubeconfig acting as the operator ServiceAccount it created."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from specops.errors import ClusterError
from specops_lab.cluster import service_account_kubeconfig
from specops_lab.launch._errors import LaunchError

__all__ = ["CHART_DIR", "ChartRelease", "installed_chart", "operator_kubeconfig"]

CHART_DIR = Path(__file__).resolve().parents[3] / "charts" / "specops"


@dataclass(frozen=True)
class ChartRelease:
    """An installed release and the objects its manifest holds."""

    name: str
    namespace: str
    objects: tuple[dict[str, Any], ...]

    def _one(self, kind: str) -> dict[str, Any]:
        found = [o for o in self.objects if o["kind"] == kind]
        if len(found) != 1:
            raise LaunchError(f"release {self.name}: expected one {kind}, found {len(found)}")
        return found[0]

    @property
    def service_account(self) -> tuple[str, str]:
        """Namespace and name of the operator's ServiceAccount."""
        meta = self._one("ServiceAccount")["metadata"]
        return meta.get("namespace", self.namespace), meta["name"]

    @property
    def operator_deployment(self) -> str:
        return str(self._one("Deployment")["metadata"]["name"])

    @property
    def operator_args(self) -> tuple[str, ...]:
        """The arguments the chart gives ``specops operator``, to run it elsewhere as the
        chart would."""
        (container,) = self._one("Deployment")["spec"]["template"]["spec"]["containers"]
        return tuple(container.get("args") or ())


def _scale(kubeconfig: Path, namespace: str, deployment: str, replicas: int) -> None:
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    try:
        client.AppsV1Api(api).patch_namespaced_deployment_scale(
            deployment, namespace, {"spec": {"replicas": replicas}}
        )
    except ApiException as exc:
        raise LaunchError(
            f"could not scale {namespace}/{deployment} to {replicas}: {exc.status} {exc.reason}"
        ) from exc
    finally:
        api.close()


@contextmanager
def installed_chart(
    kubeconfig: Path,
    *,
    release: str = "specops",
    namespace: str = "specops-system",
    values: Mapping[str, Any] | None = None,
    chart: Path = CHART_DIR,
    operator_replicas: int | None = None,
) -> Iterator[ChartRelease]:
    """Install ``chart`` (no wait: its operator image need not exist), optionally scale the
    in-cluster operator (0 when the operator runs elsewhere), uninstall on the way out."""
    with helm.Config(kubeconfig_path=str(kubeconfig), namespace=namespace) as cfg:
        try:
            summary = cfg.install(
                chart, release, dict(values or {}), create_namespace=True, timeout=120
            )
        except helm.HelmError as exc:
            raise LaunchError(
                f"helm install {release} {chart} into {namespace} failed: {exc}"
                " (a release of that name may already exist: helm uninstall it first)"
            ) from exc
        try:
            objects = tuple(d for d in yaml.safe_load_all(summary["manifest"]) if d)
            installed = ChartRelease(release, namespace, objects)
            if operator_replicas is not None:
                _scale(kubeconfig, namespace, installed.operator_deployment, operator_replicas)
            yield installed
        finally:
            cfg.uninstall(release, timeout=60, ignore_not_found=True)


def operator_kubeconfig(admin_kubeconfig: Path, installed: ChartRelease, path: Path) -> Path:
    """Write a kubeconfig acting as the release's operator ServiceAccount to ``path`` (0600)."""
    namespace, name = installed.service_account
    try:
        text = service_account_kubeconfig(admin_kubeconfig, namespace, name)
    except ClusterError as exc:
        raise LaunchError(f"no token for the operator's ServiceAccount: {exc}") from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(text)
    return path
