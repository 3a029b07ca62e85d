"""The chart's namespaced mode on a real control plane: an operator that watches given
namespaces gets a Role in each and nothing cluster-wide, and works within them.

The chart is installed with ``operator.watchNamespaces`` and the operator runs here as the
chart's ServiceAccount with the arguments of the chart's own Deployment, so what is checked
is the chart's RBAC and the operator together: it serves the watched namespace, it is
refused everywhere else by the API server, and it runs without asking for more.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client, config
from specops_lab.cluster import ClusterInfo
from specops_lab.launch import ChartRelease, OperatorProcess, installed_chart, operator_kubeconfig

from e2e.harness import Kubectl, Wait, apply, example, filled
from specops.api import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.e2e


@pytest.fixture
def release(cluster: ClusterInfo, namespace: str) -> Iterator[ChartRelease]:
    values = {"operator": {"watchNamespaces": [namespace], "clusterWide": False}}
    with installed_chart(
        cluster.kubeconfig,
        release="specops-ns",
        namespace="specops-ns",
        values=values,
        operator_replicas=0,
    ) as installed:
        yield installed


def _can(api: client.ApiClient, verb: str, resource: str, namespace: str, group: str) -> bool:
    """Whether the API server lets the caller of ``api`` do ``verb`` on ``resource``."""
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, namespace=namespace, group=group
            )
        )
    )
    answer = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(filled(answer.status).allowed)


def test_a_namespaced_operator_serves_its_namespace_and_nothing_else(
    cluster: ClusterInfo,
    api_client: client.ApiClient,
    kubectl: Kubectl,
    wait: Wait,
    namespace: str,
    other_namespace: str,
    release: ChartRelease,
    tmp_path: Path,
) -> None:
    args = [a for a in release.operator_args if a.startswith("--namespace")]
    assert args == [f"--namespace={namespace}"]
    kinds = {o["kind"] for o in release.objects}
    assert {"Role", "RoleBinding"} <= kinds
    # Nothing cluster-wide but get and patch on its own CRD, by name (crds.manage).
    cluster_rules = [
        rule for o in release.objects if o["kind"] == "ClusterRole" for rule in o["rules"]
    ]
    assert cluster_rules == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": ["speculativeservices.specops.io"],
            "verbs": ["get", "patch"],
        }
    ]

    identity = operator_kubeconfig(cluster.kubeconfig, release, tmp_path / "kubeconfig")
    as_operator = config.new_client_from_config(config_file=str(identity))  # type: ignore[no-untyped-call]
    try:
        for ns, allowed in ((namespace, True), (other_namespace, False)):
            assert _can(as_operator, "patch", "deployments", ns, "apps") is allowed, ns
            assert _can(as_operator, "watch", PLURAL, ns, GROUP) is allowed, ns
        assert not _can(as_operator, "list", PLURAL, "", GROUP)  # not cluster-wide
    finally:
        as_operator.close()

    operator = OperatorProcess(identity, tmp_path / "operator.log", extra_args=args)
    operator.start()
    try:
        doc = example(namespace)
        apply(kubectl, tmp_path, doc)
        apps = client.AppsV1Api(api_client)
        custom = client.CustomObjectsApi(api_client)

        def served() -> bool:
            found = cast(
                "dict[str, Any]",
                custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, doc["metadata"]["name"]
                ),
            )
            status = found.get("status") or {}
            return bool(status.get("observedGeneration") == found["metadata"]["generation"])

        wait(served, "the operator to reconcile the service in its namespace")
        apps.read_namespaced_deployment(doc["metadata"]["name"], namespace)
        log = operator.process.log.read_text(errors="replace")
        assert "Forbidden" not in log, log  # kopf logs APIForbiddenError on a 403
        assert operator.process.running
    finally:
        operator.stop()
