"""With the Prometheus Operator's API in the cluster: the chart installs its monitoring
objects (found through ``.Capabilities.APIVersions`` on a real API server) and the operator
applies a PodMonitor per SpeculativeService that selects its pods and names their ports.

The CRDs are the strict subset the chart tests validate against (their schemas are
upstream's field names and types), installed for this module only and removed after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from specops_lab.cluster import ClusterInfo
from specops_lab.launch import OperatorProcess, installed_chart, operator_kubeconfig

from e2e.harness import Kubectl, Wait, apply, example

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "tests" / "chart" / "monitoring.coreos.com-subset.yaml"
GROUP, VERSION = "monitoring.coreos.com", "v1"
Obj = dict[str, Any]
_ESTABLISHED = (
    "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Established')].status}{' '}{end}"
)


@pytest.fixture(scope="module")
def monitoring_api(kubectl: Kubectl, wait: Wait) -> Iterator[None]:
    """The Prometheus Operator's CRDs, established, then deleted after the module."""
    kubectl("apply", "-f", str(CRDS))

    def established() -> bool:
        # Polled with the suite's timeout, not `kubectl wait`'s 60 s: on a loaded machine
        # the API server has taken longer to establish them.
        found = kubectl("get", "-f", str(CRDS), "-o", _ESTABLISHED, check=False)
        states = found.stdout.split()
        return found.returncode == 0 and bool(states) and all(s == "True" for s in states)

    try:
        wait(established, "the Prometheus Operator's CRDs to be established")
        yield
    finally:
        kubectl("delete", "-f", str(CRDS), "--wait=true", check=False)


def _names(objects: tuple[Obj, ...], kind: str) -> list[str]:
    return [o["metadata"]["name"] for o in objects if o["kind"] == kind]


def test_chart_and_operator_create_the_monitoring_objects(
    monitoring_api: None,
    cluster: ClusterInfo,
    api_client: client.ApiClient,
    kubectl: Kubectl,
    wait: Wait,
    namespace: str,
    tmp_path: Path,
) -> None:
    values = {"operator": {"clusterWide": True}}
    with installed_chart(
        cluster.kubeconfig,
        release="specops-mon",
        namespace="specops-mon",
        values=values,
        operator_replicas=0,
    ) as release:
        assert _names(release.objects, "ServiceMonitor"), "no ServiceMonitor with the API present"
        assert _names(release.objects, "PrometheusRule"), "no PrometheusRule with the API present"
        custom = client.CustomObjectsApi(api_client)
        for plural, kind in (
            ("servicemonitors", "ServiceMonitor"),
            ("prometheusrules", "PrometheusRule"),
        ):
            for name in _names(release.objects, kind):
                custom.get_namespaced_custom_object(GROUP, VERSION, "specops-mon", plural, name)

        identity = operator_kubeconfig(cluster.kubeconfig, release, tmp_path / "kubeconfig")
        operator = OperatorProcess(identity, tmp_path / "operator.log")
        operator.start()
        try:
            doc = example(namespace)
            name = doc["metadata"]["name"]
            apply(kubectl, tmp_path, doc)

            def pod_monitor() -> Obj | None:
                try:
                    found = custom.get_namespaced_custom_object(
                        GROUP, VERSION, namespace, "podmonitors", name
                    )
                except client.ApiException as exc:
                    if exc.status == 404:
                        return None
                    raise
                return cast(Obj, found)

            wait(lambda: pod_monitor() is not None, "the operator's PodMonitor")
            monitor = pod_monitor()
            assert monitor is not None
            deployment = client.AppsV1Api(api_client).read_namespaced_deployment(name, namespace)
            template = deployment.spec.template
            assert template.metadata is not None and template.spec is not None
            selector = monitor["spec"]["selector"]["matchLabels"]
            assert selector.items() <= (template.metadata.labels or {}).items()
            ports = {p.name for c in template.spec.containers for p in c.ports or ()}
            endpoints = monitor["spec"]["podMetricsEndpoints"]
            assert {e["port"] for e in endpoints} <= ports, (endpoints, ports)
            owners = monitor["metadata"]["ownerReferences"]
            assert [o["kind"] for o in owners] == ["SpeculativeService"]
        finally:
            operator.stop()
