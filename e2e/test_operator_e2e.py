"""The operator on a real control plane: installed by its Helm chart, run with the chart's
RBAC identity, driving real Deployments through the real controller-manager and scheduler.

The chart is installed once for the module, cluster-wide (its ClusterRole) so that each
test's fresh namespace is served, and the operator runs as a local process acting as the
chart's ServiceAccount (the chart's own operator Deployment sits on the fake CPU node,
where kwok runs nothing). Each test then works on the example SpeculativeService.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import helm_python as helm
import kopf
import pytest
import yaml
from kubernetes import client
from specops_lab.cluster import GPU_RESOURCE, ClusterInfo, service_account_kubeconfig
from specops_lab.launch import OperatorProcess
from specops_operator import FIELD_MANAGER, Kube

from e2e.harness import EXAMPLE, Kubectl, Phases, Wait, apply, example, filled, plain
from specops.api import GROUP, PLURAL, VERSION, crd, parse_service
from specops.render import (
    HASH_ANNOTATION,
    OWNER_UID_LABEL,
    RenderOptions,
    child_labels,
    plan,
    speculative_config_status,
)

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "specops"
CHART_CRD = CHART / "crds" / f"{GROUP}_{PLURAL}.yaml"
RELEASE = "specops"
RELEASE_NAMESPACE = "specops-system"
NAME = "llama"  # the example's name
Obj = dict[str, Any]


# -- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def phases(request: pytest.FixtureRequest) -> Iterator[Phases]:
    """Phase timings, printed after the module's last test."""
    timings = Phases()
    yield timings
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # shown without -s, also when all pass
            reporter.write_sep("-", "operator e2e phase timings")
            for line in timings.report():
                reporter.write_line(line)


@pytest.fixture(scope="module")
def release(cluster: ClusterInfo, phases: Phases) -> Iterator[Obj]:
    """The chart, installed by the Helm library like `helm install --wait`; uninstalled after."""
    values = {"operator": {"clusterWide": True}}
    with helm.Config(kubeconfig_path=str(cluster.kubeconfig), namespace=RELEASE_NAMESPACE) as cfg:
        with phases("helm install (CRDs, RBAC, operator Deployment)"):
            summary = cfg.install(
                CHART, RELEASE, values, create_namespace=True, wait="watcher", timeout=90
            )
        try:
            yield summary
        finally:
            cfg.uninstall(RELEASE, wait="watcher", timeout=60)


def _manifest_objects(summary: Obj) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(summary["manifest"]) if doc]


@pytest.fixture(scope="module")
def operator_kubeconfig(
    cluster: ClusterInfo, release: Obj, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A kubeconfig acting as the ServiceAccount the chart created for the operator."""
    (account,) = [o for o in _manifest_objects(release) if o["kind"] == "ServiceAccount"]
    meta = account["metadata"]
    path = tmp_path_factory.mktemp("operator") / "kubeconfig"
    path.write_text(service_account_kubeconfig(cluster.kubeconfig, meta["namespace"], meta["name"]))
    return path


@pytest.fixture(scope="module")
def operator(operator_kubeconfig: Path, phases: Phases) -> Iterator[OperatorProcess]:
    """The real operator, running locally with the chart's RBAC identity; stopped after."""
    process = OperatorProcess(operator_kubeconfig, operator_kubeconfig.with_name("operator.log"))
    try:
        with phases("operator start"):
            process.start()
        yield process
    finally:
        process.stop()


# -- reading the cluster --------------------------------------------------------------


def _service(api: client.ApiClient, namespace: str, name: str = NAME) -> Obj:
    custom = client.CustomObjectsApi(api)
    found = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return cast(Obj, found)


def _deployment(api: client.ApiClient, namespace: str, name: str = NAME) -> Obj:
    apps = client.AppsV1Api(api)
    return plain(api, apps.read_namespaced_deployment(name, namespace))


def _pods(api: client.ApiClient, namespace: str, name: str = NAME) -> list[client.V1Pod]:
    """The service's pods that are not on their way out."""
    selector = ",".join(f"{k}={v}" for k, v in child_labels(name).items())
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in pods if filled(p.metadata).deletion_timestamp is None]


def _foreign_pod_is_left_out(
    api: client.ApiClient, namespace: str, selector: dict[str, str], wait: Wait
) -> None:
    """A Ready pod no SpeculativeService owns, with the service's app labels, on a GPU node:
    the Service's selector (what the endpoint controller selects by; pod IPs on loopback
    cannot be endpoint addresses here) and the PDB's expected pods leave it out."""
    core = client.CoreV1Api(api)
    name = f"{NAME}-intruder"
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": child_labels(NAME)},
        "spec": {
            "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.33.0"}],
            "tolerations": [{"operator": "Exists"}],
            "nodeSelector": {"type": "kwok"},
        },
    }
    core.create_namespaced_pod(namespace, cast(client.V1Pod, pod))
    try:

        def ready() -> bool:
            status = core.read_namespaced_pod(name, namespace).status
            conditions = (status.conditions or []) if status is not None else []
            return any(c.type == "Ready" and c.status == "True" for c in conditions)

        wait(ready, "the foreign pod to be Ready")
        label_selector = ",".join(f"{k}={v}" for k, v in selector.items())
        selected = core.list_namespaced_pod(namespace, label_selector=label_selector).items
        names = {filled(p.metadata).name for p in selected}
        assert name not in names and len(names) == 2, names
        assert name in {filled(p.metadata).name for p in _pods(api, namespace)}
        wait(
            lambda: (
                filled(
                    client.PolicyV1Api(api)
                    .read_namespaced_pod_disruption_budget(f"{NAME}-pdb", namespace)
                    .status
                ).expected_pods
                == 2
            ),
            "the PDB to count its 2 pods",
        )
    finally:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def _conditions(obj: Obj) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}


def _engine_args(deployment: Obj) -> list[str]:
    (engine,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"
    ]
    return list(engine["args"])


def _speculative_config(args: list[str]) -> Obj:
    config: Obj = json.loads(args[args.index("--speculative-config") + 1])
    return config


def _pod_ready(pod: client.V1Pod) -> bool:
    status = filled(pod.status)
    return status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in status.conditions or []
    )


def _converged(api: client.ApiClient, namespace: str) -> bool:
    """The service, its Deployment and its pods all agree with the current spec."""
    service = _service(api, namespace)
    status = service.get("status", {})
    want = service["spec"]["replicas"]
    conditions = _conditions(service)
    if status.get("observedGeneration") != service["metadata"]["generation"]:
        return False
    if status.get("readyReplicas") != want or conditions.get("Ready") != "True":
        return False
    try:
        deployment = _deployment(api, namespace)
    except client.ApiException:
        return False
    live = deployment["status"]
    if (
        deployment["spec"]["replicas"] != want
        or live.get("observedGeneration", 0) < deployment["metadata"]["generation"]
    ):
        return False
    if not want == live.get("replicas") == live.get("updatedReplicas") == live.get("readyReplicas"):
        return False
    pods = _pods(api, namespace)
    args = _engine_args(deployment)
    return len(pods) == want and all(
        _pod_ready(p)
        and next(c for c in filled(p.spec).containers if c.name == "vllm").args == args
        for p in pods
    )


def _expected_hash(service: Obj) -> str:
    """The render hash the operator must converge to for ``service`` as it is now."""
    deployment = plan(parse_service(service), RenderOptions()).objects[0]
    value: str = deployment["metadata"]["annotations"][HASH_ANNOTATION]
    return value


def _event_reasons(api: client.ApiClient, namespace: str) -> list[tuple[str | None, str | None]]:
    events = client.CoreV1Api(api).list_namespaced_event(
        namespace,
        field_selector=f"involvedObject.kind=SpeculativeService,involvedObject.name={NAME}",
    )
    return [(e.reason, e.message) for e in events.items]


def _posted(api: client.ApiClient, namespace: str, reason: str) -> list[str]:
    """The service's Events of one reason, as "type: message"."""
    events = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={NAME},reason={reason}"
    )
    return [f"{e.type}: {e.message}" for e in events.items]


def _wait_for_event(
    wait: Wait, api: client.ApiClient, namespace: str, reason: str, message: str
) -> None:
    """kopf posts Events from a queue, a moment after the write they report."""
    wait(lambda: (reason, message) in _event_reasons(api, namespace), f"the {reason} Event")


def _table(output: str) -> list[dict[str, str]]:
    """Rows of a kubectl table, cut at the header's column starts (empty cells stay empty)."""
    header, *rows = output.splitlines()
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [header[a:b].strip() for a, b in bounds]
    return [{n: row[a:b].strip() for n, (a, b) in zip(names, bounds, strict=True)} for row in rows]


@pytest.fixture
def rollout(
    api_client: client.ApiClient,
    kubectl: Kubectl,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    wait: Wait,
    phases: Phases,
) -> Callable[[], None]:
    """Apply the example into the test's namespace and wait until it has rolled out."""

    def run() -> None:
        with phases("apply example -> 2 pods Ready"):
            apply(kubectl, tmp_path, example(namespace))
            wait(lambda: _converged(api_client, namespace), "the example to roll out")

    return run


# -- 1, 2: the chart and the operator's identity ---------------------------------------


def test_chart_installs_crd_rbac_and_the_operator_deployment(
    release: Obj, api_client: client.ApiClient
) -> None:
    assert release["status"] == "deployed"
    kinds = {o["kind"] for o in _manifest_objects(release)}
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"} <= kinds
    extensions = client.ApiextensionsV1Api(api_client)
    definition = extensions.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
    assert definition.status is not None and definition.status.conditions is not None
    assert definition.status.accepted_names is not None
    conditions = {c.type: c.status for c in definition.status.conditions}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"
    assert "NonStructuralSchema" not in conditions
    assert definition.status.accepted_names.short_names == ["specsvc"]
    # helm's wait: the chart's own operator pod is Ready (on the fake CPU node, running nothing).
    deployment = client.AppsV1Api(api_client).read_namespaced_deployment(RELEASE, RELEASE_NAMESPACE)
    assert deployment.status is not None
    assert deployment.status.ready_replicas == 1


def _count_rules(schema: Any) -> int:
    if isinstance(schema, dict):
        own = len(schema.get("x-kubernetes-validations", []))
        return own + sum(_count_rules(value) for value in schema.values())
    if isinstance(schema, list):
        return sum(_count_rules(item) for item in schema)
    return 0


def test_every_cel_rule_was_accepted_at_crd_creation(
    release: Obj, api_client: client.ApiClient
) -> None:
    """The API server compiles each rule and checks its cost budget when the CRD is created;
    what it stored is what the chart shipped."""
    live = plain(
        api_client,
        client.ApiextensionsV1Api(api_client).read_custom_resource_definition(f"{PLURAL}.{GROUP}"),
    )
    shipped = yaml.safe_load(CHART_CRD.read_text())
    assert _count_rules(shipped) > 20
    assert _count_rules(live["spec"]) == _count_rules(shipped["spec"])


def test_operator_runs_as_the_charts_service_account_with_least_privilege(
    operator: OperatorProcess, kubectl: Kubectl
) -> None:
    as_operator = ("--kubeconfig", str(operator.kubeconfig))
    whoami = kubectl(*as_operator, "auth", "whoami", "-o", "json").stdout
    user = json.loads(whoami)["status"]["userInfo"]["username"]
    assert user == f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}"

    def can(*action: str) -> bool:
        answer = kubectl(*as_operator, "auth", "can-i", *action, check=False).stdout.strip()
        return answer == "yes"

    assert can("patch", "deployments.apps", "-A")
    assert can("patch", "speculativeservices.specops.io", "--subresource=status", "-A")
    assert can("create", "events", "-A")
    assert not can("get", "secrets", "-A")
    assert not can("create", "pods", "-A")
    assert not can("delete", "speculativeservices.specops.io", "-A")
    # It only ever patches, and children go with their owner; the one delete is of a
    # canary's Deployment once the canary ends.
    for resource in ("deployments.apps", "services", "poddisruptionbudgets.policy"):
        assert not can("update", resource, "-A"), resource
    assert can("delete", "deployments.apps", "-A")
    for resource in ("services", "poddisruptionbudgets.policy"):
        assert not can("delete", resource, "-A"), resource
    # Pods are read from the operator's watch of the pods it owns; never written.
    assert can("watch", "pods", "-A") and can("list", "pods", "-A")
    assert not can("patch", "pods", "-A") and not can("delete", "pods", "-A")


def test_a_cluster_wide_operator_may_not_write_in_system_namespaces(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, tmp_path: Path, wait: Wait
) -> None:
    """RBAC lets a cluster-wide operator patch Deployments anywhere; the chart's admission
    policy refuses its writes in kube-system, and only its own."""
    service = parse_service(example(namespace))
    deployment = copy.deepcopy(plan(service, RenderOptions()).objects[0])
    as_operator = ("--kubeconfig", str(operator.kubeconfig))

    def dry_run(target: str, *identity: str) -> subprocess.CompletedProcess[str]:
        child = copy.deepcopy(deployment)
        child["metadata"]["namespace"] = target
        path = tmp_path / f"{target}.yaml"
        path.write_text(yaml.safe_dump(child))
        apply_ = ("apply", "--server-side", "--dry-run=server", f"--field-manager={FIELD_MANAGER}")
        return kubectl(*identity, *apply_, "-f", str(path), check=False)

    def refused_in_kube_system() -> bool:
        return dry_run("kube-system", *as_operator).returncode != 0

    wait(refused_in_kube_system, "the admission policy to refuse the operator in kube-system")
    refusal = dry_run("kube-system", *as_operator).stderr
    assert "the specops operator may not write deployments in namespace kube-system" in refusal
    assert dry_run(namespace, *as_operator).returncode == 0, "its own namespaces stay open"
    assert dry_run("kube-system").returncode == 0, "the admin is not confined"


# -- 3: the example, end to end ---------------------------------------------------------


def test_example_rolls_out_with_status_printer_columns_explain_and_scale(
    api_client: client.ApiClient,
    kubectl: Kubectl,
    operator: OperatorProcess,
    wait: Wait,
    phases: Phases,
) -> None:
    namespace = "default"  # the example's own namespace: applied exactly as shipped
    try:
        with phases("apply example -> 2 pods Ready"):
            kubectl("apply", "-f", str(EXAMPLE))
            wait(lambda: _converged(api_client, namespace), "the example to roll out")
        service = _service(api_client, namespace)
        deployment = _deployment(api_client, namespace)

        # The Deployment: vllm serve with the --speculative-config JSON, plus the sidecar.
        template = deployment["spec"]["template"]["spec"]
        assert [c["name"] for c in template["containers"]] == ["vllm", "specops-sidecar"]
        config = _speculative_config(_engine_args(deployment))
        assert config == {
            "method": "eagle3",
            "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "num_speculative_tokens": 3,
            "num_speculative_tokens_per_batch_size": [[1, 64, 3], [65, 128, 1], [129, 256, 0]],
        }
        assert json.loads(service["status"]["speculativeConfig"]["json"]) == config
        assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
        assert deployment["metadata"]["annotations"][HASH_ANNOTATION] == _expected_hash(service)

        # Owned children, collected with their owner.
        owned = [
            deployment,
            plain(
                api_client, client.CoreV1Api(api_client).read_namespaced_service(NAME, namespace)
            ),
            plain(
                api_client,
                client.PolicyV1Api(api_client).read_namespaced_pod_disruption_budget(
                    f"{NAME}-pdb", namespace
                ),
            ),
        ]
        for child in owned:
            (owner,) = child["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["uid"]) == (
                "SpeculativeService",
                service["metadata"]["uid"],
            )
        # Every child selects the pods by the owner's uid, which only the operator sets.
        uid = {OWNER_UID_LABEL: service["metadata"]["uid"]}
        deployment_spec, service_spec, pdb_spec = (child["spec"] for child in owned)
        for selector in (
            deployment_spec["selector"]["matchLabels"],
            service_spec["selector"],
            pdb_spec["selector"]["matchLabels"],
        ):
            assert uid.items() <= selector.items(), selector
            assert owner["controller"] is True

        # Pods went through the real scheduler onto the GPU nodes.
        for pod in _pods(api_client, namespace):
            assert pod.spec is not None and pod.spec.node_name is not None
            assert pod.spec.node_name.startswith("kwok-gpu-")
            engine = next(c for c in pod.spec.containers if c.name == "vllm")
            assert engine.resources is not None and engine.resources.limits is not None
            assert engine.resources.limits[GPU_RESOURCE] == "1"

        # Status: observed generation, replicas, conditions.
        status = service["status"]
        assert status["observedGeneration"] == service["metadata"]["generation"]
        assert (status["replicas"], status["readyReplicas"]) == (2, 2)
        # MetricsAvailable is the control loop's, written with its first decision (30 s in; no
        # engine runs here to measure it): absent until then, False after.
        assert {"MetricsAvailable": "False", **_conditions(service)} == {
            "Ready": "True",
            "Progressing": "False",
            "Degraded": "False",
            "SpeculationActive": "True",
            "MetricsAvailable": "False",
        }

        # Events on the service say what the operator did.
        created = {m for r, m in _event_reasons(api_client, namespace) if r == "Created"}
        assert {f"Deployment {NAME} created", f"Service {NAME} created"} <= created
        assert f"PodDisruptionBudget {NAME}-pdb created" in created

        # kubectl get: the printer columns.
        (row,) = _table(kubectl("get", "specsvc", NAME, "-n", namespace).stdout)
        assert list(row) == [
            "NAME",
            "MODE",
            "K",
            "CONCURRENCY",
            "ACCEPTLEN",
            "RECOMMENDED",
            "REASON",
            "READY",
            "AGE",
        ]
        assert (row["NAME"], row["MODE"], row["K"], row["READY"]) == (NAME, "Auto", "3", "True")
        assert row["CONCURRENCY"] == row["ACCEPTLEN"] == ""  # no measurements yet

        # kubectl explain: the descriptions of the models.
        explained = " ".join(
            kubectl("explain", "speculativeservice.spec.speculation").stdout.split()
        )
        schema = yaml.safe_load(CHART_CRD.read_text())["spec"]["versions"][0]["schema"][
            "openAPIV3Schema"
        ]
        speculation = schema["properties"]["spec"]["properties"]["speculation"]
        for field in (speculation, *speculation["properties"].values()):
            assert " ".join(field["description"].split()) in explained

        # kubectl scale, through the scale subresource, reaches the pods.
        with phases("kubectl scale 2 -> 3 pods Ready"):
            kubectl("scale", "specsvc", NAME, "-n", namespace, "--replicas=3")
            wait(lambda: _converged(api_client, namespace), "3 ready replicas after the scale")
        scale = json.loads(
            kubectl(
                "get", "specsvc", NAME, "-n", namespace, "--subresource=scale", "-o", "json"
            ).stdout
        )
        assert scale["spec"]["replicas"] == scale["status"]["replicas"] == 3
        assert scale["status"]["selector"] == _service(api_client, namespace)["status"]["selector"]
    finally:
        kubectl("delete", "-f", str(EXAMPLE), "--ignore-not-found", "--timeout=60s")


def test_a_foreign_pod_with_the_app_labels_joins_neither_the_service_nor_the_pdb(
    api_client: client.ApiClient, kubectl: Kubectl, operator: OperatorProcess, wait: Wait
) -> None:
    namespace = "default"
    try:
        kubectl("apply", "-f", str(EXAMPLE))
        wait(lambda: _converged(api_client, namespace), "the example to roll out")
        selector = client.CoreV1Api(api_client).read_namespaced_service(NAME, namespace)
        _foreign_pod_is_left_out(
            api_client, namespace, filled(filled(selector.spec).selector), wait
        )
    finally:
        kubectl("delete", "-f", str(EXAMPLE), "--ignore-not-found", "--timeout=60s")


# -- 4: bad resources, refused by the API server ----------------------------------------


def _changed(path: str, value: Any) -> Obj:
    """The example's spec with the dotted ``path`` set to ``value`` (None removes it)."""
    spec: Obj = copy.deepcopy(example("default")["spec"])
    *parents, leaf = path.split(".")
    node = spec
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if value is None:
        node.pop(leaf)
    else:
        node[leaf] = value
    return spec


# (name, spec, the field the API server's message names, what it says about it)
BAD: list[tuple[str, Obj, str, str]] = [
    # CEL rules (x-kubernetes-validations), each reported at its own field
    (
        "k-initial-above-max",
        _changed("speculation.numSpeculativeTokens", {"initial": 6, "min": 1, "max": 5}),
        "spec.speculation.numSpeculativeTokens.initial",
        "must lie between min and max; change initial or widen the range",
    ),
    (
        "eagle3-without-draft",
        _changed("speculation.draftModel", None),
        "spec.speculation.draftModel",
        "is required for methods dflash, draft_model, eagle, eagle3: set it",
    ),
    (
        "ngram-with-draft",
        _changed("speculation.method", "ngram"),
        "spec.speculation.draftModel",
        "must be unset for methods ngram, ngram_gpu, suffix",
    ),
    (
        "owned-flag-in-extra-args",
        _changed("engine.extraArgs", ["--enable-prefix-caching", "--port=9000"]),
        "spec.engine.extraArgs",
        "must not carry flags the operator sets",
    ),
    (
        "owned-flag-spelled-another-way",
        _changed("engine.extraArgs", ["--speculative_conf.num_speculative_tokens=8"]),
        "spec.engine.extraArgs",
        "must not carry flags the operator sets",
    ),
    (
        "owned-flag-before-a-newline",
        _changed("engine.extraArgs", ["--port=\n9000"]),
        "spec.engine.extraArgs",
        "must not carry flags the operator sets",
    ),
    (
        "config-file-in-extra-args",
        _changed("engine.extraArgs", ["--config=/etc/vllm.yaml"]),
        "spec.engine.extraArgs",
        "must not carry flags the operator sets",
    ),
    (
        "env-sets-hf-home",
        _changed("engine.env", [{"name": "HF_HOME", "value": "/tmp"}]),
        "spec.engine.env",
        "HF_HOME is set by the operator from spec.engine.modelCache.mountPath",
    ),
    (
        "data-parallel-size-not-a-number",
        _changed("engine.extraArgs", ["--data-parallel-size=abc"]),
        "spec.engine.extraArgs",
        "--data-parallel-size takes a whole number of engines",
    ),
    (
        "tp-above-gpus",
        _changed("engine.tensorParallelSize", 2),
        "spec.engine.tensorParallelSize",
        "must not exceed spec.engine.gpusPerPod",
    ),
    (
        "gpu-in-resources",
        _changed("engine.resources", {"limits": {"nvidia.com/gpu": 2}}),
        "spec.engine.resources.limits",
        "must not set nvidia.com/gpu: use spec.engine.gpusPerPod",
    ),
    (
        "goodput-without-tpot",
        _changed("policy", {"objective": "Goodput"}),
        "spec.policy.tpotTargetMilliseconds",
        "is required for objective Goodput",
    ),
    (
        "overlapping-schedule",
        _changed("speculation.initialSchedule.1.minBatchSize", 60),
        "spec.speculation.initialSchedule",
        "ranges must not overlap",
    ),
    (
        "prometheus-without-url",
        _changed("metrics", {"source": "Prometheus"}),
        "spec.metrics.prometheusUrl",
        "is required when source is Prometheus",
    ),
    # the structural schema: enums, bounds, required fields
    (
        "unknown-mode",
        _changed("speculation.mode", "Sometimes"),
        "spec.speculation.mode",
        'Unsupported value: "Sometimes": supported values: "Auto", "Advise", "Fixed", "Off"',
    ),
    (
        "negative-replicas",
        _changed("replicas", -1),
        "spec.replicas",
        "should be greater than or equal to 0",
    ),
    (
        "k-of-40",
        _changed("speculation.numSpeculativeTokens", {"initial": 40, "max": 40}),
        "spec.speculation.numSpeculativeTokens.initial",
        "should be less than or equal to 32",
    ),
    ("empty-model", _changed("model", ""), "spec.model", "should be at least 1 chars long"),
    ("missing-speculation", _changed("speculation", None), "spec.speculation", "Required value"),
]


def _bad_document(name: str, spec: Obj) -> Obj:
    metadata = {"name": name, "namespace": "default"}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpeculativeService",
        "metadata": metadata,
        "spec": spec,
    }


def test_bad_resources_are_refused_by_the_api_server_naming_the_field(
    release: Obj, kubectl: Kubectl, tmp_path: Path, phases: Phases
) -> None:
    """All bad objects in one `kubectl apply --dry-run=server`; each error names its object."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all([_bad_document(name, spec) for name, spec, _, _ in BAD]))
    with phases("dry-run apply of the bad-spec table"):
        result = kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
    assert result.returncode != 0
    assert result.stdout.strip() == ""  # not one was accepted
    errors = {
        name: line
        for line in result.stderr.splitlines()
        for name, _, _, _ in BAD
        if f'SpeculativeService.specops.io "{name}" is invalid' in line
    }
    for name, _, field, message in BAD:
        assert name in errors, f"{name}: no error in\n{result.stderr}"
        assert f"{field}: " in errors[name], errors[name]
        assert message in errors[name], errors[name]


def test_names_no_child_can_carry_are_refused_by_the_api_server(
    release: Obj, kubectl: Kubectl, tmp_path: Path
) -> None:
    """A dot (no Service can carry it) or 64 characters (a label value's limit) is refused
    at the API server with the rule's message, not left to retry in the operator."""
    names = ["llama.v2", "l" * 64]
    good = yaml.safe_load(EXAMPLE.read_text())["spec"]
    path = tmp_path / "names.yaml"
    path.write_text(yaml.safe_dump_all([_bad_document(name, good) for name in names]))
    result = kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
    assert result.returncode != 0 and result.stdout.strip() == "", result.stdout
    for name in names:
        line = next(
            (x for x in result.stderr.splitlines() if f'"{name}" is invalid' in x), result.stderr
        )
        assert "metadata.name must be at most 63 lowercase letters" in line, line


def test_unknown_fields_are_refused_by_strict_field_validation(
    release: Obj, kubectl: Kubectl, tmp_path: Path
) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(_bad_document("typo", _changed("engine.gpuPerPod", 2))))
    result = kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
    assert result.returncode != 0
    assert 'strict decoding error: unknown field "spec.engine.gpuPerPod"' in result.stderr


# -- 5: spec change rolls the pods; drift is reverted ------------------------------------


def test_spec_change_rolls_pods_without_losing_capacity_and_drift_is_reverted(
    rollout: Callable[[], None],
    api_client: client.ApiClient,
    kubectl: Kubectl,
    namespace: str,
    wait: Wait,
    phases: Phases,
) -> None:
    rollout()
    before = {filled(p.metadata).name for p in _pods(api_client, namespace)}
    assert not [r for r, _ in _event_reasons(api_client, namespace) if r in ("Updated", "Reverted")]

    lowest_available = 2

    def rolled() -> bool:
        nonlocal lowest_available
        available = _deployment(api_client, namespace)["status"].get("availableReplicas", 0)
        lowest_available = min(lowest_available, available)
        return _converged(api_client, namespace)

    k_path = "/spec/speculation/initialSchedule/0/numSpeculativeTokens"
    k_of_4 = json.dumps([{"op": "replace", "path": k_path, "value": 4}])
    with phases("spec change (k 3 -> 4) -> pods rolled"):
        kubectl("patch", "specsvc", NAME, "-n", namespace, "--type=json", "-p", k_of_4)
        wait(rolled, "the pods to roll to k = 4")
    deployment = _deployment(api_client, namespace)
    assert _speculative_config(_engine_args(deployment))["num_speculative_tokens"] == 4
    assert not before & {filled(p.metadata).name for p in _pods(api_client, namespace)}
    assert lowest_available == 2  # maxUnavailable: 0
    service = _service(api_client, namespace)
    assert service["status"]["speculativeConfig"]["numSpeculativeTokens"] == 4
    assert deployment["metadata"]["annotations"][HASH_ANNOTATION] == _expected_hash(service)
    _wait_for_event(wait, api_client, namespace, "Updated", f"Deployment {NAME} updated")

    # Someone edits fields the operator owns: replicas and the rollout strategy.
    drift = {"spec": {"replicas": 5, "strategy": {"rollingUpdate": {"maxUnavailable": 2}}}}
    with phases("drift of the Deployment -> reverted"):
        kubectl(
            "patch", "deployment", NAME, "-n", namespace, "--type=merge", "-p", json.dumps(drift)
        )

        def reverted() -> bool:
            spec = _deployment(api_client, namespace)["spec"]
            return bool(
                spec["replicas"] == 2 and spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
            )

        wait(reverted, "the operator to revert the edit of its Deployment")
        wait(lambda: _converged(api_client, namespace), "the service to settle after the revert")
    _wait_for_event(wait, api_client, namespace, "Reverted", f"Deployment {NAME} reverted")


# -- 5b: server-side apply: the operator owns exactly the fields it renders --------------


def _vllm(deployment: Obj) -> Obj:
    engines: list[Obj] = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"
    ]
    (engine,) = engines
    return engine


def _owners(deployment: Obj) -> set[tuple[str, str]]:
    """(field manager, operation) of the Deployment's own fields (not its status)."""
    return {
        (entry["manager"], entry["operation"])
        for entry in deployment["metadata"]["managedFields"]
        if entry.get("subresource", "") == ""
    }


def _with_extras(namespace: str) -> Obj:
    """The example with a node selector, env vars and extra arguments, the last of each to go."""
    doc = example(namespace)
    engine = doc["spec"]["engine"]
    engine["nodeSelector"] = {"example.com/pool": "gpu", "example.com/zone": "a"}
    engine["env"] = [{"name": "KEEP_ME", "value": "1"}, {"name": "DROP_ME", "value": "2"}]
    engine["extraArgs"] = ["--enable-prefix-caching", "--disable-log-requests"]
    return doc


def _drop_extras(doc: Obj) -> None:
    engine = doc["spec"]["engine"]
    del engine["nodeSelector"]["example.com/zone"]
    engine["env"] = [{"name": "KEEP_ME", "value": "1"}]
    engine["extraArgs"] = ["--enable-prefix-caching"]


def _without_dropped_extras(deployment: Obj) -> None:
    """The Deployment holds the reduced spec's selector, env and arguments, nothing more of them."""
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"example.com/pool": "gpu"}
    env = {e["name"] for e in _vllm(deployment)["env"]}
    assert "DROP_ME" not in env and "KEEP_ME" in env
    args = _engine_args(deployment)
    assert "--disable-log-requests" not in args and "--enable-prefix-caching" in args


def _rendered(api: client.ApiClient, namespace: str) -> bool:
    """The Deployment exists and carries the render of the service's current spec."""
    try:
        deployment = _deployment(api, namespace)
    except client.ApiException:
        return False
    annotations = deployment["metadata"].get("annotations") or {}
    return annotations.get(HASH_ANNOTATION) == _expected_hash(_service(api, namespace))


def _adopted_children(service: Obj) -> list[Obj]:
    """The objects the operator renders for ``service``, owned by it."""
    children = [copy.deepcopy(c) for c in plan(parse_service(service), RenderOptions()).objects]
    kopf.adopt(children, owner=cast(kopf.Body, service))
    return children


def test_fields_dropped_from_the_spec_leave_the_deployment_and_other_managers_keep_theirs(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    kubectl: Kubectl,
    namespace: str,
    tmp_path: Path,
    wait: Wait,
    phases: Phases,
) -> None:
    """A merge patch would keep a map key or list entry the operator stopped rendering; the
    apply removes it, leaves what other field managers wrote, and takes back owned fields."""
    doc = _with_extras(namespace)

    def rendered() -> bool:
        return _rendered(api_client, namespace)

    with phases("apply with selector, env, args -> Deployment"):
        apply(kubectl, tmp_path, doc)
        wait(rendered, "the Deployment of the first spec")
    deployment = _deployment(api_client, namespace)
    assert (FIELD_MANAGER, "Apply") in _owners(deployment)
    engine = doc["spec"]["engine"]
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == engine["nodeSelector"]

    # Other managers write beside the operator: an annotation, and an entry in a list the
    # operator renders (the engine's env, a list keyed by name).
    note = ("example.com/owner=platform", "--field-manager=platform-team")
    kubectl("annotate", "deployment", NAME, "-n", namespace, *note)
    foreign = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "vllm", "env": [{"name": "TRACE", "value": "1"}]}]}
            }
        },
    }
    foreign_path = tmp_path / "foreign.yaml"
    foreign_path.write_text(yaml.safe_dump(foreign))
    kubectl("apply", "--server-side", "--field-manager=tracing", "-f", str(foreign_path))

    # The spec drops a selector key, an env var and an extra argument.
    _drop_extras(doc)
    with phases("spec drops fields -> Deployment updated"):
        apply(kubectl, tmp_path, doc)
        wait(rendered, "the Deployment of the reduced spec")
    deployment = _deployment(api_client, namespace)
    _without_dropped_extras(deployment)
    assert "TRACE" in {e["name"] for e in _vllm(deployment)["env"]}
    assert deployment["metadata"]["annotations"]["example.com/owner"] == "platform"
    assert {("platform-team", "Update"), ("tracing", "Apply")} <= _owners(deployment)
    _wait_for_event(wait, api_client, namespace, "Updated", f"Deployment {NAME} updated")
    reasons = _event_reasons(api_client, namespace)
    assert "Reverted" not in {reason for reason, _ in reasons}  # the env entry is not drift

    # An unchanged render applied again is not a write, even with the other manager's env
    # entry in the list (the reconciler applies then, and must not loop on its own writes).
    # The Deployment controller may write status between a read and the apply: look until
    # one apply leaves the version it read, which a write never does.
    children = _adopted_children(_service(api_client, namespace))
    kube = Kube(api_client)

    def unchanged_by_apply() -> bool:
        version = (kube.get(children[0]) or {})["metadata"]["resourceVersion"]
        return bool(kube.apply(children[0])["metadata"]["resourceVersion"] == version)

    wait(unchanged_by_apply, "an apply of the unchanged render that writes nothing")

    # Someone edits fields the operator renders: the apply takes them back, the rest stays.
    containers = deployment["spec"]["template"]["spec"]["containers"]
    engine_path = f"/spec/template/spec/containers/{containers.index(_vllm(deployment))}"
    keep_me = [e["name"] for e in _vllm(deployment)["env"]].index("KEEP_ME")
    selector_path = "/spec/template/spec/nodeSelector/example.com~1pool"
    edit = [
        {"op": "replace", "path": selector_path, "value": "cpu"},
        {"op": "replace", "path": f"{engine_path}/env/{keep_me}/value", "value": "9"},
    ]
    with phases("edit of owned fields -> reverted"):
        kubectl("patch", "deployment", NAME, "-n", namespace, "--type=json", "-p", json.dumps(edit))

        def reverted() -> bool:
            live = _deployment(api_client, namespace)
            values = {e["name"]: e.get("value") for e in _vllm(live)["env"]}
            selector = live["spec"]["template"]["spec"]["nodeSelector"]
            return bool(values["KEEP_ME"] == "1" and selector == {"example.com/pool": "gpu"})

        wait(reverted, "the operator to take back its fields")
    deployment = _deployment(api_client, namespace)
    assert deployment["metadata"]["annotations"]["example.com/owner"] == "platform"
    assert "TRACE" in {e["name"] for e in _vllm(deployment)["env"]}
    _wait_for_event(wait, api_client, namespace, "Reverted", f"Deployment {NAME} reverted")


# -- 7: the operator restarts mid-rollout -------------------------------------------------


def test_operator_killed_mid_rollout_converges_after_restart(
    rollout: Callable[[], None],
    api_client: client.ApiClient,
    kubectl: Kubectl,
    operator: OperatorProcess,
    namespace: str,
    wait: Wait,
    phases: Phases,
) -> None:
    rollout()
    old_hash = _deployment(api_client, namespace)["metadata"]["annotations"][HASH_ANNOTATION]

    def patch(path: str, value: int) -> None:
        change = [{"op": "replace", "path": path, "value": value}]
        kubectl("patch", "specsvc", NAME, "-n", namespace, "--type=json", "-p", json.dumps(change))

    k_path = "/spec/speculation/initialSchedule/0/numSpeculativeTokens"
    try:
        patch(k_path, 4)
        wait(
            lambda: (
                _deployment(api_client, namespace)["metadata"]["annotations"][HASH_ANNOTATION]
                != old_hash
            ),
            "the operator to write the new Deployment",
        )
        operator.kill()  # while the new pods roll
        # Changes made while it is down must be picked up too.
        patch(k_path, 5)
        patch("/spec/replicas", 3)
    finally:
        with phases("operator restart"):
            operator.start()
    with phases("restart -> converged on the latest spec"):
        wait(lambda: _converged(api_client, namespace), "convergence after the restart")
    service = _service(api_client, namespace)
    deployment = _deployment(api_client, namespace)
    assert deployment["metadata"]["annotations"][HASH_ANNOTATION] == _expected_hash(service)
    assert _speculative_config(_engine_args(deployment))["num_speculative_tokens"] == 5
    assert service["status"]["speculativeConfig"]["numSpeculativeTokens"] == 5
    assert len(_pods(api_client, namespace)) == 3


def test_pods_are_admitted_under_pod_security_restricted(
    api_client: client.ApiClient,
    kubectl: Kubectl,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    wait: Wait,
) -> None:
    """In a namespace that enforces Pod Security "restricted", the only thing the rendered
    pods lack is the engine's user (vLLM's image runs as root), and the spec's
    engine.securityContext supplies it: then the pods are admitted."""
    core = client.CoreV1Api(api_client)
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    core.patch_namespace(namespace, {"metadata": {"labels": labels}})
    service = example(namespace)
    apply(kubectl, tmp_path, service)

    def refusals() -> list[str]:
        found = core.list_namespaced_event(namespace, field_selector="reason=FailedCreate")
        return [e.message or "" for e in found.items if "PodSecurity" in (e.message or "")]

    wait(lambda: bool(refusals()), "the ReplicaSet's pods refused as root under restricted")
    refused = refusals()[0]
    assert 'container "vllm" must set securityContext.runAsNonRoot=true' in refused, refused
    for fixed in ("allowPrivilegeEscalation", "capabilities", "seccompProfile", "sidecar"):
        assert fixed not in refused, refused
    service["spec"]["engine"]["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "fsGroup": 1000,
    }
    apply(kubectl, tmp_path, service)
    wait(lambda: len(_pods(api_client, namespace)) == 2, "both pods admitted under restricted")
    pod = plain(api_client, _pods(api_client, namespace)[0])
    assert pod["spec"]["automountServiceAccountToken"] is False
    engine = pod["spec"]["containers"][0]
    assert engine["securityContext"]["runAsUser"] == 1000


def test_a_child_the_api_server_refuses_degrades_the_service_with_its_message(
    api_client: client.ApiClient,
    kubectl: Kubectl,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    wait: Wait,
) -> None:
    """Requests above limits pass the CRD (no CEL compares quantities) but no Deployment can
    carry them: the API server's own words reach a Degraded condition and one Warning."""
    service = example(namespace)
    service["spec"]["engine"]["resources"] = {
        "requests": {"memory": "64Gi"},
        "limits": {"memory": "32Gi"},
    }
    apply(kubectl, tmp_path, service)

    def degraded() -> Obj | None:
        conditions = _service(api_client, namespace).get("status", {}).get("conditions", [])
        return next((c for c in conditions if c.get("reason") == "ChildRefused"), None)

    wait(lambda: degraded() is not None, "a Degraded condition with the API server's refusal")
    condition = degraded()
    assert condition is not None and condition["status"] == "True"
    assert "must be less than or equal to memory limit" in condition["message"], condition
    (warning,) = _posted(api_client, namespace, "ChildRefused")
    assert warning.startswith("Warning: ")


def test_a_users_service_with_the_name_is_not_taken_over(
    api_client: client.ApiClient,
    kubectl: Kubectl,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    wait: Wait,
) -> None:
    """A Service the user made under the SpeculativeService's name keeps its selector and
    outlives the SpeculativeService; once the user deletes it, the operator makes its own."""
    core = client.CoreV1Api(api_client)
    users = client.V1Service(
        metadata=client.V1ObjectMeta(name=NAME),
        spec=client.V1ServiceSpec(
            selector={"app": "web"}, ports=[client.V1ServicePort(port=80, target_port=8080)]
        ),
    )
    core.create_namespaced_service(namespace, users)
    apply(kubectl, tmp_path, example(namespace))

    def warnings() -> list[str]:
        return _posted(api_client, namespace, "NameTaken")

    wait(lambda: bool(warnings()), "a NameTaken Warning for the user's Service")
    assert warnings()[0].startswith(f"Warning: Service {namespace}/{NAME} already exists")
    wait(
        lambda: any(
            c["reason"] == "NameTaken"
            for c in _service(api_client, namespace).get("status", {}).get("conditions", [])
        ),
        "a Degraded condition naming the Service",
    )
    kept = plain(api_client, core.read_namespaced_service(NAME, namespace))
    assert kept["spec"]["selector"] == {"app": "web"}
    assert not kept["metadata"].get("ownerReferences")
    core.delete_namespaced_service(NAME, namespace)
    wait(
        lambda: bool(
            (s := _try_read_service(core, namespace)) is not None and s.metadata.owner_references
        ),
        "the operator's own Service once the user's is gone",
    )


def _try_read_service(core: client.CoreV1Api, namespace: str) -> Any:
    try:
        return core.read_namespaced_service(NAME, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_a_forged_status_choice_is_refused_with_a_warning_and_rewritten(
    rollout: Callable[[], None],
    api_client: client.ApiClient,
    kubectl: Kubectl,
    namespace: str,
    wait: Wait,
) -> None:
    """Anyone who may patch status could claim the controller chose k=20 with another draft
    model (the spec allows 1-5): the pods keep the spec's config and a Warning names why."""
    rollout()
    recorded = _service(api_client, namespace)["status"]["speculativeConfig"]
    forged = {
        **recorded,
        "source": "Controller",
        "numSpeculativeTokens": 20,
        "schedule": None,
        "draftModel": "attacker/evil-draft",
        "json": json.dumps({"model": "attacker/evil-draft", "num_speculative_tokens": 20}),
    }
    patch = json.dumps({"status": {"speculativeConfig": forged}})
    kubectl(
        "patch", "specsvc", NAME, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", patch,
    )  # fmt: skip

    def refused() -> list[str]:
        return _posted(api_client, namespace, "StatusRefused")

    wait(lambda: bool(refused()), "a StatusRefused event for the forged status")
    (message,) = refused()
    assert message.startswith("Warning: ") and "k=20 is outside" in message, message
    wait(
        lambda: _service(api_client, namespace)["status"]["speculativeConfig"]["source"] == "Spec",
        "status rewritten from the spec",
    )
    rewritten = _service(api_client, namespace)["status"]["speculativeConfig"]
    assert "evil" not in json.dumps(rewritten)
    engine = _speculative_config(_engine_args(_deployment(api_client, namespace)))
    assert 1 <= engine["num_speculative_tokens"] <= 5
    assert engine["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


_WRITERS = ("specops-reconciler", "specops-controller")


def _status_managers(service: Obj) -> dict[str, Obj]:
    """Each field manager of the status subresource, and the status fields it owns."""
    return {
        m["manager"]: m["fieldsV1"].get("f:status", {})
        for m in service["metadata"].get("managedFields") or []
        if m.get("subresource") == "status"
    }


def _old_operators_status(doc: Obj) -> Obj:
    """Status as an operator before the per-writer managers wrote it on creation: the spec's
    day-zero table, not measured yet."""
    wanted = plan(parse_service(doc), RenderOptions())
    config = speculative_config_status(wanted.spec, wanted.speculation, "Spec")
    stamp = "2026-01-01T00:00:00Z"
    conditions = [
        ("Ready", "False", "DeploymentMissing", "the Deployment does not exist yet"),
        ("MetricsAvailable", "Unknown", "AwaitingController", "no measurements yet"),
    ]
    return {
        "observedGeneration": 1,
        "conditions": [
            {"type": t, "status": v, "reason": r, "message": m, "lastTransitionTime": stamp}
            for t, v, r, m in conditions
        ],
        "speculativeConfig": config.model_dump(by_alias=True, exclude_none=True, mode="json"),
    }


def test_each_status_writer_has_a_field_manager_and_takes_over_an_older_operators_status(
    api_client: client.ApiClient,
    kubectl: Kubectl,
    operator: OperatorProcess,
    namespace: str,
    tmp_path: Path,
    wait: Wait,
    phases: Phases,
) -> None:
    """An operator before the per-writer managers merge-patched all of status as one manager.
    Once upgraded, the reconciler and the control loop hold status under a field manager each,
    every condition with its one writer; what the old manager set and no writer sends any
    more (the draft's json once speculation is off) is removed by the API server."""
    doc = example(namespace)
    operator.stop()
    try:
        apply(kubectl, tmp_path, doc)
        old = json.dumps({"status": _old_operators_status(doc)})
        kubectl(
            "patch", "specsvc", NAME, "-n", namespace, "--subresource=status", "--type=merge",
            f"--field-manager={FIELD_MANAGER}", "-p", old,
        )  # fmt: skip
        assert set(_status_managers(_service(api_client, namespace))) == {FIELD_MANAGER}
    finally:
        with phases("operator restart"):
            operator.start()
    # The control loop writes after its initial delay (30 s), with no engine to measure.
    wait(lambda: "lastDecision" in _service(api_client, namespace)["status"], "a first decision")
    wait(lambda: _converged(api_client, namespace), "the example to roll out")
    service = _service(api_client, namespace)
    managers = _status_managers(service)
    assert set(managers) == set(_WRITERS), managers
    reconciler, controller = (managers[w] for w in _WRITERS)
    assert set(reconciler["f:conditions"]) == {
        f'k:{{"type":"{t}"}}' for t in ("Ready", "Progressing", "Degraded", "SpeculationActive")
    }
    assert set(controller["f:conditions"]) == {'k:{"type":"MetricsAvailable"}'}
    assert "f:speculativeConfig" in reconciler and "f:speculativeConfig" not in controller
    assert {"f:lastDecision", "f:controller"} <= set(controller)
    # kopf's own marks (its finalizer, the last handled spec) are metadata, never status.
    for entry in service["metadata"]["managedFields"]:
        assert "f:status" not in entry["fieldsV1"] or entry["manager"] in _WRITERS, entry
    conditions = {c["type"]: c for c in service["status"]["conditions"]}
    assert conditions["MetricsAvailable"]["reason"] != "AwaitingController"

    change = [{"op": "replace", "path": "/spec/speculation/mode", "value": "Off"}]
    kubectl("patch", "specsvc", NAME, "-n", namespace, "--type=json", "-p", json.dumps(change))

    def off() -> bool:
        now = _service(api_client, namespace)
        observed = now["status"].get("observedGeneration") == now["metadata"]["generation"]
        return observed and not now["status"]["speculativeConfig"]["enabled"]

    wait(off, "status to report speculation off")
    config = _service(api_client, namespace)["status"]["speculativeConfig"]
    assert set(config) == {"enabled", "numSpeculativeTokens", "source", "specHash"}, config


def test_an_operator_upgrade_brings_the_crd_to_its_schema(
    operator: OperatorProcess,
    kubectl: Kubectl,
    namespace: str,
    tmp_path: Path,
    wait: Wait,
) -> None:
    """Helm never upgrades a chart's crds/: with the CRD of an older release (here, one
    without spec.engine.securityContext) a new field is refused, or pruned; an operator
    started with the chart's --manage-crd applies its own schema, and the field is kept."""
    current = crd()
    old = copy.deepcopy(current)
    engine = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["engine"]["properties"]
    del engine["securityContext"]
    crd_file = tmp_path / "crd.yaml"

    def install(definition: Obj, manager: str) -> None:
        crd_file.write_text(yaml.safe_dump(definition))
        kubectl(
            "apply", "--server-side", "--force-conflicts", f"--field-manager={manager}",
            "-f", str(crd_file),
        )  # fmt: skip

    service = example(namespace)
    service["spec"]["engine"]["securityContext"] = {"runAsNonRoot": True, "runAsUser": 1000}
    manifest = tmp_path / "service.yaml"
    manifest.write_text(yaml.safe_dump(service))

    def accepted() -> bool:
        dry = ("apply", "--dry-run=server", "--validate=strict", "-f", str(manifest))
        return kubectl(*dry, check=False).returncode == 0

    upgraded = OperatorProcess(
        operator.kubeconfig, tmp_path / "upgraded-operator.log", extra_args=("--manage-crd",)
    )
    install(old, "helm")  # as an older chart left it
    try:
        wait(lambda: not accepted(), "the old schema to refuse spec.engine.securityContext")
        operator.stop()
        upgraded.start()
        wait(accepted, "the operator to bring the CRD to its own schema")
        wait(
            lambda: "SpeculativeService CRD applied" in upgraded.process.tail(),
            "the operator to say it applied the CRD",
        )
    finally:
        upgraded.stop()
        install(current, "e2e-restore")
        operator.start()


# -- 6: deletion cascades ---------------------------------------------------------------


def test_deleting_the_service_removes_everything_it_owns(
    rollout: Callable[[], None],
    api_client: client.ApiClient,
    kubectl: Kubectl,
    namespace: str,
    wait: Wait,
    phases: Phases,
) -> None:
    """Last in the module: the garbage collector starts watching a new kind (the CRD the
    chart just installed) only at its next discovery resync, every 30 s, so the first
    cascade after the install waits for that; the tests before it shorten the wait."""
    rollout()
    selector = ",".join(f"{k}={v}" for k, v in child_labels(NAME).items())
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    policy = client.PolicyV1Api(api_client)
    listings: dict[str, Callable[[], Any]] = {
        "deployments": lambda: apps.list_namespaced_deployment(namespace, label_selector=selector),
        "replicasets": lambda: apps.list_namespaced_replica_set(namespace, label_selector=selector),
        "pods": lambda: core.list_namespaced_pod(namespace, label_selector=selector),
        "services": lambda: core.list_namespaced_service(namespace, label_selector=selector),
        "pdbs": lambda: policy.list_namespaced_pod_disruption_budget(
            namespace, label_selector=selector
        ),
    }
    assert all(listing().items for listing in listings.values())
    with phases("kubectl delete (operator lets go)"):
        kubectl("delete", "specsvc", NAME, "-n", namespace, "--timeout=60s")

    def emptied(listing: Callable[[], Any]) -> Callable[[], bool]:
        return lambda: not listing().items

    with phases("owned objects collected"):
        for kind, listing in listings.items():
            wait(emptied(listing), f"the garbage collector to remove {kind}")
