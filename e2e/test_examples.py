"""Every manifest in examples/ on a real control plane, by server-side dry run (dryRun=All).

The chart is installed cluster-wide, with the Prometheus Operator's API present and the
Prometheus example's server in ``operator.allowedPrometheus``, as that example asks. Each
example is then applied as a user applies it, unchanged: the API server checks it against
the CRD the chart installed (schema, CEL rules, unknown fields). And the children the
operator renders for it (Deployment, Service, PodDisruptionBudget, PodMonitor) are applied
as the chart's operator applies them: its ServiceAccount, its field manager, through the
chart's RBAC and confinement policy. A dry run stores nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from specops_lab.cluster import ClusterInfo
from specops_lab.launch import ChartRelease, installed_chart, operator_kubeconfig
from specops_operator import FIELD_MANAGER

from e2e.harness import Kubectl
from e2e.test_monitoring import monitoring_api  # noqa: F401  (the fixture, by its name)
from specops.api import GROUP, PLURAL, parse_service
from specops.render import RenderOptions, plan

pytestmark = pytest.mark.e2e

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
PROMETHEUS_EXAMPLE = EXAMPLES_DIR / "prometheus.yaml"
# kubectl's note on each object a server-side dry run accepted.
DRY_RUN_NOTE = "(server dry run)"
SERVER_DRY_RUN = ("apply", "--server-side", "--dry-run=server", "--validate=strict")


def _prometheus_url() -> str:
    url: str = yaml.safe_load(PROMETHEUS_EXAMPLE.read_text())["spec"]["metrics"]["prometheusUrl"]
    return url


@pytest.fixture(scope="module")
def release(
    cluster: ClusterInfo,
    kubectl: Kubectl,
    monitoring_api: None,  # noqa: F811  (the Prometheus Operator's CRDs, for the PodMonitors)
) -> Iterator[ChartRelease]:
    values = {"operator": {"clusterWide": True, "allowedPrometheus": [_prometheus_url()]}}
    with installed_chart(
        cluster.kubeconfig,
        release="specops-examples",
        namespace="specops-examples",
        values=values,
        operator_replicas=0,
    ) as installed:
        kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{PLURAL}.{GROUP}")
        yield installed


@pytest.fixture(scope="module")
def as_operator(
    cluster: ClusterInfo, release: ChartRelease, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, ...]:
    """kubectl's arguments to act as the chart's operator ServiceAccount."""
    path = tmp_path_factory.mktemp("operator") / "kubeconfig"
    return ("--kubeconfig", str(operator_kubeconfig(cluster.kubeconfig, release, path)))


def test_the_chart_lets_the_operator_read_the_prometheus_examples_server(
    release: ChartRelease,
) -> None:
    assert f"--allowed-prometheus={_prometheus_url()}" in release.operator_args


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_the_api_server_accepts_the_example_as_shipped(
    example: Path, release: ChartRelease, kubectl: Kubectl
) -> None:
    result = kubectl(*SERVER_DRY_RUN, "-f", str(example), check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(DRY_RUN_NOTE) == 1, result.stdout


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_the_charts_operator_may_apply_the_examples_children(
    example: Path, as_operator: tuple[str, ...], kubectl: Kubectl, tmp_path: Path
) -> None:
    service = parse_service(yaml.safe_load(example.read_text()))
    children = plan(service, RenderOptions(pod_monitor=True)).objects
    assert {o["kind"] for o in children} == {
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "PodMonitor",
    }
    path = tmp_path / "children.yaml"
    path.write_text(yaml.safe_dump_all(children))
    manager = f"--field-manager={FIELD_MANAGER}"
    result = kubectl(*as_operator, *SERVER_DRY_RUN, manager, "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(DRY_RUN_NOTE) == len(children), result.stdout
