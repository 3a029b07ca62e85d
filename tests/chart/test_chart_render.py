"""The chart renders the objects each set of values asks for, and nothing more."""

from __future__ import annotations

import json
from typing import Any

import celpy
import helm_python as helm
import pytest

from specops.render import OPERATOR_JOB

from .chart_render import CHART_DIR, MONITORING_API, NAMESPACE, by_kind, render_manifests
from .conftest import Render

NON_DEFAULT: dict[str, Any] = {
    "replicaCount": 2,
    "operator": {
        "watchNamespaces": ["llm", "llm-staging"],
        "peering": {"enabled": True, "name": "specops-ha"},
        "extraArgs": ["--sidecar-image=registry.local/specops:1.2.3"],
    },
    "image": {"tag": "1.2.3", "pullPolicy": "Always"},
    "metrics": {"podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus"}}},
    "prometheusRule": {
        "labels": {"release": "kube-prometheus"},
        "alertLabels": {"team": "inference"},
        "disabledAlerts": ["SpecopsReconfigurationsFlapping"],
    },
    "dashboards": {"namespace": "monitoring", "annotations": {"grafana_folder": "LLM"}},
}


def _kinds(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(obj["kind"] for obj in objects)


def _container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def test_defaults_render_a_namespaced_operator_without_monitoring_objects(render: Render) -> None:
    objects = render()
    assert _kinds(objects) == [
        "ClusterRole",  # the CRD's, by name (crds.manage)
        "ClusterRoleBinding",
        "ConfigMap",
        "ConfigMap",
        "Deployment",
        "Pod",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    (role,) = by_kind(objects, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    args = _container(objects)["args"]
    assert args[0] == "operator"
    assert f"--namespace={NAMESPACE}" in args
    assert not any(arg.startswith("--peering") for arg in args)
    # The vLLM pods' sidecar runs from the operator's own image, whatever the repository.
    assert f"--sidecar-image={_container(objects)['image']}" in args
    mirrored = _container(render({"image": {"repository": "mirror.local/specops"}}))
    assert mirrored["image"].startswith("mirror.local/specops:")
    assert f"--sidecar-image={mirrored['image']}" in mirrored["args"]


def test_every_namespaced_object_names_its_namespace(render: Render) -> None:
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterKopfPeering",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for values in ({}, NON_DEFAULT, {"operator": {"clusterWide": True}}):
        for obj in render(values, api_versions=MONITORING_API):
            if obj["kind"] not in cluster_scoped:
                assert obj["metadata"].get("namespace"), obj["metadata"]["name"]


def test_operator_container_is_locked_down(render: Render) -> None:
    objects = render()
    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = _container(objects)
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == "health"
    assert "--liveness=http://0.0.0.0:8081/healthz" in container["args"]
    assert "--metrics-port=8080" in container["args"]
    assert container["image"] == "ghcr.io/specops/specops:0.1.0"


def _workload_cluster_roles(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ClusterRoles other than the one that lets the operator bring its CRD up to date."""
    return [
        r for r in by_kind(objects, "ClusterRole") if not r["metadata"]["name"].endswith("-crd")
    ]


def test_the_operator_may_update_its_own_crd_and_nothing_else_cluster_wide(
    render: Render,
) -> None:
    objects = render()
    (role,) = [r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"].endswith("-crd")]
    assert role["rules"] == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": ["speculativeservices.specops.io"],
            "verbs": ["get", "patch"],
        }
    ]
    assert "--manage-crd" in _container(objects)["args"]
    unmanaged = render({"crds": {"manage": False}})
    assert not by_kind(unmanaged, "ClusterRole") and not by_kind(unmanaged, "ClusterRoleBinding")
    assert "--manage-crd" not in _container(unmanaged)["args"]


def test_watch_namespaces_get_a_role_each_and_no_cluster_role(render: Render) -> None:
    objects = render(NON_DEFAULT)
    assert not _workload_cluster_roles(objects)
    roles = {role["metadata"]["namespace"] for role in by_kind(objects, "Role")}
    bindings = {b["metadata"]["namespace"] for b in by_kind(objects, "RoleBinding")}
    assert roles == bindings == {"llm", "llm-staging"}
    for binding in by_kind(objects, "RoleBinding"):
        (subject,) = binding["subjects"]
        assert subject == {"kind": "ServiceAccount", "name": "specops", "namespace": NAMESPACE}
    args = _container(objects)["args"]
    assert {"--namespace=llm", "--namespace=llm-staging"} <= set(args)


def test_rbac_covers_what_the_operator_does_and_only_that(render: Render) -> None:
    (role,) = by_kind(render(), "Role")
    granted = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    # GET, LIST and WATCH to read (the watch cache), PATCH to write (apply, status, kopf's
    # marks), create for an apply that makes a child: never update (PUT), and delete only for
    # a canary's Deployment once the canary ends (the garbage collector takes the rest).
    children = {"get", "create", "patch"}
    watched = {"get", "list", "watch", "create", "patch"}  # read from the watch cache
    assert granted == {
        ("specops.io", "speculativeservices"): {"get", "list", "watch", "patch"},
        ("specops.io", "speculativeservices/status"): {"get", "patch"},
        ("apps", "deployments"): {"get", "list", "watch", "create", "patch", "delete"},
        ("", "services"): watched,
        ("policy", "poddisruptionbudgets"): watched,
        ("monitoring.coreos.com", "podmonitors"): children,
        ("", "pods"): {"list", "watch"},
        ("", "events"): {"create"},
        ("events.k8s.io", "events"): {"create"},
    }


def test_cluster_wide_uses_a_cluster_role_and_all_namespaces(render: Render) -> None:
    objects = render({"operator": {"clusterWide": True, "peering": {"enabled": True}}})
    assert not by_kind(objects, "Role")
    (cluster_role,) = _workload_cluster_roles(objects)
    (binding,) = [
        b
        for b in by_kind(objects, "ClusterRoleBinding")
        if not b["metadata"]["name"].endswith("-crd")
    ]
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    resources = {res for rule in cluster_role["rules"] for res in rule["resources"]}
    assert {"clusterkopfpeerings", "customresourcedefinitions", "namespaces"} <= resources
    assert not any(arg.startswith("--namespace") for arg in _container(objects)["args"])
    (peering,) = by_kind(objects, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == "specops"


def test_peering_runs_replicas_with_a_peering_object_per_namespace(render: Render) -> None:
    objects = render(NON_DEFAULT)
    (deployment,) = by_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert "--peering=specops-ha" in _container(objects)["args"]
    peerings = by_kind(objects, "KopfPeering")
    assert {p["metadata"]["namespace"] for p in peerings} == {"llm", "llm-staging"}
    for role in by_kind(objects, "Role"):
        assert any("kopfpeerings" in rule["resources"] for rule in role["rules"])


def test_sharding_runs_replicas_that_hold_shard_leases_in_the_release_namespace(
    render: Render,
) -> None:
    objects = render({"replicaCount": 3, "operator": {"sharding": {"shards": 6}}})
    (deployment,) = by_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    args = _container(objects)["args"]
    assert "--shards=6" in args and "--shard-lease-seconds=15" in args
    assert f"--shard-group={deployment['metadata']['name']}" in args
    assert not any(arg.startswith("--peering") for arg in args)
    names = {e["name"] for e in _container(objects)["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= names  # the replica's identity and its Leases' home
    (role,) = [r for r in by_kind(objects, "Role") if r["metadata"]["name"].endswith("-shards")]
    assert role["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    (rule,) = role["rules"]
    assert rule["resources"] == ["leases"] and "update" in rule["verbs"]
    (binding,) = [
        b for b in by_kind(objects, "RoleBinding") if b["metadata"]["name"].endswith("-shards")
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert by_kind(objects, "PodDisruptionBudget")  # a drain keeps a replica to take over


def test_without_sharding_there_are_no_shard_arguments_or_lease_rights(render: Render) -> None:
    objects = render({})
    assert not any(arg.startswith("--shard") for arg in _container(objects)["args"])
    assert not [r for r in by_kind(objects, "Role") if r["metadata"]["name"].endswith("-shards")]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": 2}, "operator.sharding.shards"),
        ({"replicaCount": 2}, "operator.peering.enabled"),
        (
            {
                "replicaCount": 2,
                "operator": {"sharding": {"shards": 4}, "peering": {"enabled": True}},
            },
            "choose one",
        ),
        (
            {"operator": {"clusterWide": True, "watchNamespaces": ["a"]}},
            "operator.watchNamespaces",
        ),
        ({"serviceAccount": {"create": False}}, "serviceAccount.name"),
    ],
)
def test_contradicting_values_fail_with_the_fix(
    chart: helm.Chart, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render_manifests(chart, values)


def test_monitoring_objects_appear_only_with_the_prometheus_operator(render: Render) -> None:
    assert not {"ServiceMonitor", "PodMonitor", "PrometheusRule"} & set(_kinds(render()))
    objects = render(NON_DEFAULT, api_versions=MONITORING_API)
    (monitor,) = by_kind(objects, "ServiceMonitor")
    (pod_monitor,) = by_kind(objects, "PodMonitor")
    assert pod_monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    (service,) = by_kind(objects, "Service")
    assert service["spec"]["ports"][0]["name"] == monitor["spec"]["endpoints"][0]["port"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    # specops_decisions_total and co. carry the SpeculativeService's namespace and service.
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    # The job the operator's alerts select it by.
    assert monitor["spec"]["endpoints"][0]["relabelings"] == [
        {"action": "replace", "targetLabel": "job", "replacement": OPERATOR_JOB}
    ]
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True
    assert by_kind(objects, "PrometheusRule")
    disabled = render(
        {"prometheusRule": {"enabled": False}, "metrics": {"serviceMonitor": {"enabled": False}}},
        api_versions=MONITORING_API,
    )
    assert not {"ServiceMonitor", "PrometheusRule"} & set(_kinds(disabled))


def test_dashboards_are_configmaps_the_grafana_sidecar_picks_up(render: Render) -> None:
    files = {path.name: path for path in (CHART_DIR / "dashboards").glob("*.json")}
    assert files
    configmaps = by_kind(render(NON_DEFAULT), "ConfigMap")
    assert len(configmaps) == len(files)
    for configmap in configmaps:
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert configmap["metadata"]["namespace"] == "monitoring"
        assert configmap["metadata"]["annotations"] == {"grafana_folder": "LLM"}
        ((name, text),) = configmap["data"].items()
        assert json.loads(text) == json.loads(files[name].read_text(encoding="utf-8"))
    custom = render({"dashboards": {"label": "grafana.io/dashboard", "labelValue": "specops"}})
    for configmap in by_kind(custom, "ConfigMap"):
        assert configmap["metadata"]["labels"]["grafana.io/dashboard"] == "specops"
    assert not by_kind(render({"dashboards": {"enabled": False}}), "ConfigMap")


def test_helm_test_hook_checks_the_metrics_service(render: Render) -> None:
    objects = render()
    (pod,) = by_kind(objects, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (service,) = by_kind(objects, "Service")
    script = pod["spec"]["containers"][0]["command"][-1]
    assert f"http://{service['metadata']['name']}.{NAMESPACE}.svc:8080/metrics" in script
    assert not by_kind(render({"tests": {"enabled": False}}), "Pod")


def test_notes_tell_what_to_do_next(chart: helm.Chart) -> None:
    notes = render_manifests(chart)["specops/templates/NOTES.txt"]
    assert "helm test specops" in notes
    assert "kubectl get specsvc" in notes
    assert "deploy/prometheus/specops.rules.yaml" in notes
    with_operator = render_manifests(chart, api_versions=MONITORING_API)[
        "specops/templates/NOTES.txt"
    ]
    assert "PrometheusRule specops" in with_operator


def test_an_operator_of_several_replicas_keeps_one_through_a_drain(render: Render) -> None:
    assert not by_kind(render(), "PodDisruptionBudget")
    objects = render(NON_DEFAULT)
    (pdb,) = by_kind(objects, "PodDisruptionBudget")
    (deployment,) = by_kind(objects, "Deployment")
    assert pdb["spec"]["minAvailable"] == 1
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def _admits(policy: dict[str, Any], namespace: str, labels: dict[str, str]) -> bool:
    """The policy's validation, evaluated (celpy) for a write into ``namespace``."""
    (validation,) = policy["spec"]["validations"]
    env = celpy.Environment()
    program = env.program(env.compile(validation["expression"]))
    metadata: dict[str, Any] = {"name": namespace}
    if labels:
        metadata["labels"] = labels
    return bool(
        program.evaluate({"namespaceObject": celpy.adapter.json_to_cel({"metadata": metadata})})
    )


def test_a_cluster_wide_operator_may_not_write_in_system_namespaces(render: Render) -> None:
    objects = render({"operator": {"clusterWide": True}})
    (policy,) = by_kind(objects, "ValidatingAdmissionPolicy")
    (binding,) = by_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    (who,) = policy["spec"]["matchConditions"]
    assert (
        who["expression"]
        == f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:specops"'
    )
    resources = {r["resources"][0] for r in policy["spec"]["matchConstraints"]["resourceRules"]}
    assert resources == {"deployments", "services", "poddisruptionbudgets", "podmonitors"}
    for system in ("kube-system", "kube-public", "kube-node-lease"):
        assert not _admits(policy, system, {})
    assert _admits(policy, "llm", {})
    assert (
        "operator.confinement.deniedNamespaces"
        in policy["spec"]["validations"][0]["messageExpression"]
    )


def test_confinement_to_labelled_namespaces(render: Render) -> None:
    confinement = {"deniedNamespaces": ["ops"], "namespaceLabels": {"specops.io/serve": "true"}}
    objects = render({"operator": {"clusterWide": True, "confinement": confinement}})
    (policy,) = by_kind(objects, "ValidatingAdmissionPolicy")
    assert _admits(policy, "llm", {"specops.io/serve": "true", "team": "a"})
    assert not _admits(policy, "llm", {"specops.io/serve": "false"})
    assert not _admits(policy, "llm", {})
    assert not _admits(policy, "ops", {"specops.io/serve": "true"})
    assert _admits(policy, "kube-system", {"specops.io/serve": "true"})  # only "ops" is denied


def test_no_policy_where_roles_confine_or_it_is_off(render: Render) -> None:
    assert not by_kind(render({}), "ValidatingAdmissionPolicy")
    off = {"clusterWide": True, "confinement": {"enabled": False}}
    assert not by_kind(render({"operator": off}), "ValidatingAdmissionPolicy")
