"""Renderers: spec plus speculation in force -> objects, deterministic and side-effect free."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from specops_lab.podrunner import container_env, expand, parse_pod

from specops.api import (
    BatchSizeRange,
    SpeculativeConfigStatus,
    SpeculativeService,
    parse_service,
    parse_spec,
)
from specops.cli import main
from specops.errors import SpecValidationError
from specops.policy import ScheduleRange, SpecConfig
from specops.render import (
    CANARY_LABEL,
    HASH_ANNOTATION,
    OWNER_UID_LABEL,
    PRE_STOP_SLEEP_SECONDS,
    RenderOptions,
    apply_defaults,
    controller_choice,
    data_parallel_size,
    performance_profile,
    plan,
    render_objects,
    selector_labels,
    spec_config,
    speculation_choice,
    speculation_from_spec,
    speculation_in_force,
    speculation_spec_hash,
    speculative_config_status,
    vllm_speculative_config,
)
from specops.vllm import SpeculativeConfig
from tests.chart.test_container_argv import dry_parse
from tests.lab.podrunner.pods import pod_of

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama.yaml"
SPEC: dict[str, Any] = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "replicas": 3,
    "engine": {"maxModelLen": 8192, "hfTokenSecret": {"name": "hf"}},
    "speculation": {"method": "eagle3", "draftModel": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
}


SELECTOR = selector_labels("llama", "uid-llama-1")


def _render(spec: dict[str, Any], speculation: SpecConfig | None = None) -> list[Any]:
    parsed = apply_defaults(parse_spec(spec))
    chosen = speculation if speculation is not None else speculation_from_spec(parsed)
    return render_objects("llama", "ml", parsed, chosen, RenderOptions(), SELECTOR)


def _args(objects: list[Any]) -> list[str]:
    return list(objects[0]["spec"]["template"]["spec"]["containers"][0]["args"])


def test_deployment_runs_vllm_with_the_speculative_config_and_the_sidecar() -> None:
    deployment, service, pdb = _render(SPEC)
    assert (deployment["kind"], service["kind"], pdb["kind"]) == (
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    )
    assert (deployment["metadata"]["name"], pdb["metadata"]["name"]) == ("llama", "llama-pdb")
    engine, sidecar = deployment["spec"]["template"]["spec"]["containers"]
    assert engine["image"] == "vllm/vllm-openai:v0.33.0"
    assert engine["command"] == ["vllm", "serve"]
    args = engine["args"]
    assert args[0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert args[args.index("--port") + 1] == "8000"
    assert args[args.index("--served-model-name") + 1] == "meta-llama/Llama-3.1-8B-Instruct"
    assert args[args.index("--max-model-len") + 1] == "8192"
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config == {
        "method": "eagle3",
        "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 3,
    }
    assert engine["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert engine["readinessProbe"]["httpGet"]["path"] == "/health"
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in (
        engine["env"]
    )
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert sidecar["args"][:2] == ["--engine-url", "http://127.0.0.1:8000"]
    assert "--prometheus-url" not in sidecar["args"]
    # The sidecar predicts with the profile of this model, for the method the engine runs.
    sidecar_args = sidecar["args"]
    assert sidecar_args[sidecar_args.index("--profile") + 1] == "llama3.1-8b-h100"
    assert sidecar_args[sidecar_args.index("--method") + 1] == SPEC["speculation"]["method"]
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert deployment["spec"]["replicas"] == 3
    labels = deployment["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "specops"
    assert labels["specops.io/service"] == "llama"


@pytest.mark.parametrize(("grace", "drain"), [(None, 110), (15, 5), (600, 590)])
def test_a_stopping_pod_drains_within_its_grace_period(grace: int | None, drain: int) -> None:
    spec = copy.deepcopy(SPEC)
    if grace is not None:
        spec["engine"]["terminationGracePeriodSeconds"] = grace
    (deployment, *_) = _render(spec)
    pod = deployment["spec"]["template"]["spec"]
    engine, sidecar = pod["containers"]
    assert pod["terminationGracePeriodSeconds"] == (grace or 120)
    # The Service drops the pod during the preStop pause; vLLM then drains for the rest of
    # the grace period less its teardown, and refuses new requests meanwhile.
    assert engine["lifecycle"] == {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_SECONDS}}}
    args = engine["args"]
    assert args[args.index("--shutdown-timeout") + 1] == str(drain)
    assert PRE_STOP_SLEEP_SECONDS + drain < pod["terminationGracePeriodSeconds"]
    assert "lifecycle" not in sidecar


def test_placement_and_pull_secrets_reach_the_pods() -> None:
    spec = copy.deepcopy(SPEC)
    spec["engine"].update(
        nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        imagePullSecrets=[{"name": "mirror"}, {"name": "ngc"}],
    )
    (deployment, *_) = _render(spec)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"] == spec["engine"]["tolerations"]
    assert pod["imagePullSecrets"] == [{"name": "mirror"}, {"name": "ngc"}]
    (plain, *_) = _render(SPEC)
    assert (
        not {"nodeSelector", "tolerations", "imagePullSecrets"}
        & plain["spec"]["template"]["spec"].keys()
    )


def test_mode_off_drops_the_speculative_config() -> None:
    spec = copy.deepcopy(SPEC)
    spec["speculation"]["mode"] = "Off"
    assert "--speculative-config" not in _args(_render(spec))


def test_per_batch_size_schedule_and_ngram_keys_reach_vllm() -> None:
    spec = copy.deepcopy(SPEC)
    spec["speculation"] = {
        "method": "ngram",
        "promptLookupMin": 2,
        "promptLookupMax": 4,
        "perBatchSizeSchedule": True,
    }
    args = _args(_render(spec))
    config = SpeculativeConfig.from_json(args[args.index("--speculative-config") + 1])
    # without an initial schedule day zero is one k: a one-range table runs the same k
    # and costs vLLM PIECEWISE graphs
    assert config.num_speculative_tokens_per_batch_size is None
    assert config.num_speculative_tokens == 3
    assert (config.prompt_lookup_min, config.prompt_lookup_max, config.model) == (2, 4, None)
    spec["speculation"]["initialSchedule"] = [
        {"minBatchSize": 1, "maxBatchSize": 32, "numSpeculativeTokens": 4},
        {"minBatchSize": 33, "maxBatchSize": 256, "numSpeculativeTokens": 1},
    ]
    args = _args(_render(spec))
    config = SpeculativeConfig.from_json(args[args.index("--speculative-config") + 1])
    assert config.num_speculative_tokens_per_batch_size == ((1, 32, 4), (33, 256, 1))
    assert config.num_speculative_tokens == 4


def test_a_model_the_catalog_lacks_gets_a_prior_derived_for_its_gpu() -> None:
    spec = copy.deepcopy(SPEC)
    spec["model"] = "Qwen/Qwen3-32B"
    spec["engine"] = {**spec.get("engine", {}), "gpu": "H200-SXM-141GB"}
    parsed = apply_defaults(parse_spec(spec))
    profile = performance_profile(parsed)
    assert profile is not None and profile.gpu == "H200-SXM-141GB" and "derived" in profile.name
    sidecar = _render(spec)[0]["spec"]["template"]["spec"]["containers"][1]["args"]
    assert "--profile" not in sidecar
    at = sidecar.index("--model")
    assert sidecar[at : at + 6] == [
        "--model",
        "Qwen/Qwen3-32B",
        "--gpu",
        "H200-SXM-141GB",
        "--tensor-parallel-size",
        "1",
    ]
    del spec["engine"]["gpu"]
    assert performance_profile(apply_defaults(parse_spec(spec))) is None


def test_the_sidecar_gets_the_engines_config_only_when_it_holds_a_table() -> None:
    def sidecar_args(speculation: SpecConfig) -> list[str]:
        containers = _render(SPEC, speculation)[0]["spec"]["template"]["spec"]["containers"]
        return list(containers[1]["args"])

    assert "--speculative-config" not in sidecar_args(SpecConfig.static(3))
    table = SpecConfig.table([[1, 16, 3], [17, 256, 1]])
    objects = _render(SPEC, table)
    engine_args = _args(objects)
    given = sidecar_args(table)
    engine_config = engine_args[engine_args.index("--speculative-config") + 1]
    assert given[given.index("--speculative-config") + 1] == engine_config
    assert SpeculativeConfig.from_json(engine_config).in_force() == table


def test_prometheus_source_and_pod_monitor() -> None:
    spec = copy.deepcopy(SPEC)
    spec["metrics"] = {"source": "Prometheus", "prometheusUrl": "http://prom:9090"}
    parsed = apply_defaults(parse_spec(spec))
    options = RenderOptions(pod_monitor=True)
    objects = render_objects(
        "llama", "ml", parsed, speculation_from_spec(parsed), options, SELECTOR
    )
    sidecar = objects[0]["spec"]["template"]["spec"]["containers"][1]
    args = sidecar["args"]
    assert args[args.index("--prometheus-url") + 1] == "http://prom:9090"
    assert objects[-1]["kind"] == "PodMonitor"
    engine, sidecar_endpoint = objects[-1]["spec"]["podMetricsEndpoints"]
    # vLLM's series get the SpeculativeService as label service, from the pod's label, and
    # every target the job the alerts select specops's own targets by.
    job = {"action": "replace", "targetLabel": "job", "replacement": "specops-pods"}
    assert engine == {
        "port": "http",
        "path": "/metrics",
        "interval": "15s",
        "relabelings": [
            {
                "action": "replace",
                "sourceLabels": ["__meta_kubernetes_pod_label_specops_io_service"],
                "targetLabel": "service",
            },
            job,
        ],
    }
    # The sidecar labels its series namespace, pod and service itself: keep them.
    assert sidecar_endpoint == {
        "port": "metrics",
        "path": "/metrics",
        "interval": "15s",
        "honorLabels": True,
        "relabelings": [job],
    }
    assert objects[-1]["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "llama"


def test_rendering_is_deterministic_pure_and_hashed() -> None:
    parsed = apply_defaults(parse_spec(SPEC))
    frozen = parsed.model_dump()
    speculation = speculation_from_spec(parsed)
    first = render_objects("llama", "ml", parsed, speculation, RenderOptions(), SELECTOR)
    second = render_objects("llama", "ml", parsed, speculation, RenderOptions(), SELECTOR)
    assert first == second
    assert parsed.model_dump() == frozen
    hashes = {o["metadata"]["annotations"][HASH_ANNOTATION] for o in first}
    assert len(hashes) == 3
    other = render_objects(
        "llama",
        "ml",
        parsed,
        SpecConfig.static(1),
        RenderOptions(),
        SELECTOR,
    )
    assert other[0]["metadata"]["annotations"] != first[0]["metadata"]["annotations"]
    assert other[1] == first[1]


def test_controller_choice_in_status_is_rendered_until_the_spec_changes() -> None:
    tables = {**SPEC["speculation"], "perBatchSizeSchedule": True}
    spec = apply_defaults(parse_spec({**SPEC, "speculation": tables}))
    chosen = SpecConfig.table([[1, 32, 4], [33, 256, 0]], cap=4)
    status = speculative_config_status(spec, chosen, "Controller")
    assert json.loads(status.json_ or "")["num_speculative_tokens"] == 4
    assert speculation_in_force(spec, status) == chosen
    edited = parse_spec({**SPEC, "speculation": {**tables, "mode": "Fixed"}})
    assert speculation_in_force(edited, status) == speculation_from_spec(edited)
    stale = status.model_copy(update={"spec_hash": "0" * 16})
    assert speculation_in_force(spec, stale) == speculation_from_spec(spec)
    assert speculation_in_force(spec, None) == speculation_from_spec(spec)
    off = speculative_config_status(spec, SpecConfig.off(), "Controller")
    assert speculation_in_force(spec, off) == SpecConfig.off()
    assert vllm_speculative_config(spec, SpecConfig.off()) is None
    assert off.spec_hash == speculation_spec_hash(spec)
    with pytest.raises(SpecValidationError):
        vllm_speculative_config(spec, SpecConfig(2, (ScheduleRange(1, 8, 3),)))
    with pytest.raises(SpecValidationError):
        spec_config(status.model_copy(update={"num_speculative_tokens": 3}))
    with pytest.raises(SpecValidationError):
        spec_config(SpeculativeConfigStatus(enabled=True))


def test_a_recorded_choice_the_spec_does_not_allow_is_refused_and_says_why() -> None:
    spec = apply_defaults(parse_spec(SPEC))  # k 1-5, no per-batch-size table
    honest = speculative_config_status(spec, SpecConfig.static(4), "Controller")
    assert controller_choice(spec, honest) == (SpecConfig.static(4), None)
    assert controller_choice(spec, None) == (None, None)
    too_many = honest.model_copy(update={"num_speculative_tokens": 20})
    chosen, why = controller_choice(spec, too_many)
    assert chosen is None and why is not None
    assert "k=20 is outside spec.speculation.numSpeculativeTokens (min 1, max 5)" in why
    assert speculation_in_force(spec, too_many) == speculation_from_spec(spec)
    row = BatchSizeRange(min_batch_size=1, max_batch_size=8, num_speculative_tokens=2)
    table = honest.model_copy(update={"schedule": [row]})
    refused = controller_choice(spec, table)[1] or ""
    assert "per-batch-size table, which the spec does not allow" in refused
    broken = honest.model_copy(update={"num_speculative_tokens": 0})  # on, with no k
    chosen, why = controller_choice(spec, broken)
    assert chosen is None and "needs num_speculative_tokens >= 1" in (why or "")


def test_plan_reads_the_status_of_a_whole_object() -> None:
    body = yaml.safe_load(EXAMPLE.read_text())
    spec = apply_defaults(parse_spec(body["spec"]))
    chosen = SpecConfig.static(2)
    status = speculative_config_status(spec, chosen, "Controller")
    body["status"] = {"speculativeConfig": status.model_dump(by_alias=True, exclude_none=True)}
    result = plan(parse_service(body), RenderOptions())
    assert (result.source, result.speculation) == ("Controller", chosen)
    assert isinstance(
        SpeculativeConfigStatus.model_validate(body["status"]["speculativeConfig"]),
        SpeculativeConfigStatus,
    )


def test_specops_render_prints_the_example() -> None:
    result = CliRunner().invoke(main, ["render", "-f", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    deployment, service, pdb = yaml.safe_load_all(result.output)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["vllm", "specops-sidecar"]
    args = containers[0]["args"]
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config["method"] == "eagle3"
    assert config["num_speculative_tokens_per_batch_size"] == [
        [1, 64, 3],
        [65, 128, 1],
        [129, 256, 0],
    ]
    assert (service["kind"], pdb["kind"]) == ("Service", "PodDisruptionBudget")


def test_specops_render_reports_a_bad_spec(tmp_path: Path) -> None:
    body = yaml.safe_load(EXAMPLE.read_text())
    del body["spec"]["speculation"]["draftModel"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(body))
    result = CliRunner().invoke(main, ["render", "-f", str(path)])
    assert result.exit_code != 0
    assert "spec.speculation.draftModel is required" in result.output


@pytest.mark.parametrize(
    ("extra", "size"),
    [
        ([], 1),
        (["--data-parallel-size", "2"], 2),
        (["--data-parallel-size=4", "--enable-prefix-caching"], 4),
        (["-dp", "8"], 8),
        (["-dp=2", "--data-parallel-size=3"], 3),  # vLLM's parser keeps the last
    ],
)
def test_data_parallel_size_comes_from_the_extra_args(extra: list[str], size: int) -> None:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"]["engine"]["extraArgs"] = extra
    assert data_parallel_size(parse_service(body).spec) == size


@pytest.mark.parametrize(("extra", "table"), [([], True), (["--data-parallel-size", "2"], False)])
def test_beyond_data_parallel_1_the_day_zero_render_is_one_k(extra: list[str], table: bool) -> None:
    """vLLM drops the table there and drafts its num_speculative_tokens at every batch size."""
    spec = copy.deepcopy(SPEC)
    spec["engine"]["extraArgs"] = extra
    spec["speculation"].update(
        perBatchSizeSchedule=True,
        initialSchedule=[
            {"minBatchSize": 1, "maxBatchSize": 16, "numSpeculativeTokens": 4},
            {"minBatchSize": 17, "maxBatchSize": 256, "numSpeculativeTokens": 1},
        ],
    )
    args = _args(_render(spec))
    config = SpeculativeConfig.from_json(args[args.index("--speculative-config") + 1])
    assert config.num_speculative_tokens == 4
    assert config.num_speculative_tokens_per_batch_size == (
        ((1, 16, 4), (17, 256, 1)) if table else None
    )


@pytest.mark.parametrize(
    ("extra", "given"), [(["--data-parallel-size", "two"], "'two'"), (["-dp"], "''")]
)
def test_a_data_parallel_size_that_is_no_integer_names_the_field(
    extra: list[str], given: str
) -> None:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"]["engine"]["extraArgs"] = extra
    with pytest.raises(SpecValidationError, match=rf"spec\.engine\.extraArgs: {given}"):
        data_parallel_size(parse_service(body).spec)


def test_dollar_references_reach_the_container_literally_not_expanded_by_the_kubelet() -> None:
    spec = copy.deepcopy(SPEC)
    spec["servedModelName"] = "$(HF_TOKEN)"
    spec["engine"]["extraArgs"] = ["--chat-template=$(HF_TOKEN)$$x"]
    spec["engine"]["env"] = [{"name": "GREETING", "value": "$(HF_TOKEN) costs $5"}]
    spec["metrics"] = {"source": "Prometheus", "prometheusUrl": "http://prom:9090/$(HF_TOKEN)"}
    pod = parse_pod(pod_of(_render(spec)[0]))
    engine, sidecar = pod.spec.containers
    env = container_env(pod, engine) | {"HF_TOKEN": "hf_secret"}
    # What the process receives once the kubelet has expanded its args and env.
    args = [expand(token, env) for token in engine.args]
    assert args[args.index("--served-model-name") + 1] == "$(HF_TOKEN)"
    assert "--chat-template=$(HF_TOKEN)$$x" in args
    assert expand(dict((v.name, v.value) for v in engine.env)["GREETING"] or "", env) == (
        "$(HF_TOKEN) costs $5"
    )
    assert not any("hf_secret" in token for token in args)
    sidecar_args = [expand(t, container_env(pod, sidecar)) for t in sidecar.args]
    assert "http://prom:9090/$(HF_TOKEN)" in sidecar_args
    # The operator's own reference is still expanded: the sidecar learns its pod's name.
    assert sidecar_args[sidecar_args.index("--pod") + 1] == "llama-abc-1"


def test_every_child_selects_the_pods_by_the_owners_uid() -> None:
    """A pod with the app.kubernetes.io labels but not the uid joins none of them."""
    service = _with_uid("uid-llama-1")
    planned = plan(service, RenderOptions(pod_monitor=True))
    wanted = {**selector_labels("llama"), OWNER_UID_LABEL: "uid-llama-1"}
    assert planned.selector == wanted
    deployment, svc, pdb, monitor = planned.objects
    assert deployment["spec"]["selector"]["matchLabels"] == wanted
    assert wanted.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["selector"] == wanted
    assert pdb["spec"]["selector"]["matchLabels"] == wanted
    assert monitor["spec"]["selector"]["matchLabels"] == wanted


def test_a_deployment_made_before_keeps_its_selector_and_its_render() -> None:
    """A live selector without the uid (immutable in the Deployment) is kept by every child,
    and the children render as before: an upgrade rolls no pod."""
    service = _with_uid("uid-llama-1")
    legacy = selector_labels("llama")
    kept = plan(service, RenderOptions(), legacy)
    assert kept.selector == legacy
    assert OWNER_UID_LABEL not in kept.objects[0]["spec"]["template"]["metadata"]["labels"]
    assert kept.objects[1]["spec"]["selector"] == legacy
    assert plan(_with_uid(None), RenderOptions()).objects == kept.objects


def _with_uid(uid: str | None) -> SpeculativeService:
    body = yaml.safe_load(EXAMPLE.read_text())
    if uid is not None:
        body["metadata"]["uid"] = uid
    return parse_service(body)


def _with_canary(canary: SpecConfig, replicas: int = 2, baseline: SpecConfig | None = None) -> Any:
    """The example with ``replicas`` and a canary of ``canary`` in status.controller."""
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["uid"] = "uid-llama-1"
    body["spec"]["replicas"] = replicas
    spec = apply_defaults(parse_spec(body["spec"]))
    in_force = speculation_from_spec(spec)
    choice = speculation_choice(baseline or in_force).model_dump(by_alias=True, exclude_none=True)
    body["status"] = {
        "controller": {
            "config": choice,
            "lastGood": choice,
            "canary": {
                "speculativeConfig": speculation_choice(canary).model_dump(
                    by_alias=True, exclude_none=True
                ),
                "baseline": choice,
                "startedAt": "2026-01-01T00:00:00Z",
                "predictedGainPercent": 12.0,
            },
        }
    }
    return parse_service(body)


def test_a_canary_runs_one_replica_in_a_deployment_of_its_own() -> None:
    result = plan(_with_canary(SpecConfig.static(5)), RenderOptions())
    assert result.canary == SpecConfig.static(5)
    fleet, canary = (o for o in result.objects if o["kind"] == "Deployment")
    assert (fleet["metadata"]["name"], fleet["spec"]["replicas"]) == ("llama", 1)
    assert (canary["metadata"]["name"], canary["spec"]["replicas"]) == ("llama-canary", 1)
    assert canary["metadata"]["labels"]["specops.io/service"] == "llama"
    labels = canary["spec"]["template"]["metadata"]["labels"]
    # The Service selects it with the rest (it gets its share of the requests); its own
    # selector and the label the controller measures it apart by say it is the canary.
    assert all(labels[k] == v for k, v in result.selector.items())
    assert labels[CANARY_LABEL] == "true"
    assert canary["spec"]["selector"]["matchLabels"] == {**result.selector, CANARY_LABEL: "true"}
    assert CANARY_LABEL not in fleet["spec"]["template"]["metadata"]["labels"]
    service = next(o for o in result.objects if o["kind"] == "Service")
    assert service["spec"]["selector"] == result.selector

    def k(deployment: Any) -> int:
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        return int(
            json.loads(args[args.index("--speculative-config") + 1])["num_speculative_tokens"]
        )

    assert k(canary) == 5 and k(fleet) == speculation_from_spec(result.spec).num_speculative_tokens
    # The fleet's pods are not restarted by the canary: only its replica count moves.
    alone = plan(_with_uid("uid-llama-1"), RenderOptions()).objects[0]
    assert fleet["spec"]["template"] == alone["spec"]["template"]


@pytest.mark.parametrize(
    ("canary", "replicas", "baseline"),
    [
        (SpecConfig.static(5), 1, None),  # one replica has no canary
        (SpecConfig.static(20), 2, None),  # outside the spec's k bounds
        (SpecConfig.static(5), 2, SpecConfig.static(4)),  # beside another config than in force
    ],
)
def test_a_canary_in_status_that_cannot_run_is_not_rendered(
    canary: SpecConfig, replicas: int, baseline: SpecConfig | None
) -> None:
    result = plan(_with_canary(canary, replicas, baseline), RenderOptions())
    assert result.canary is None
    assert [o["metadata"]["name"] for o in result.objects if o["kind"] == "Deployment"] == ["llama"]
    assert result.objects[0]["spec"]["replicas"] == replicas


def _sidecar_args(objects: list[Any]) -> list[str]:
    containers = objects[0]["spec"]["template"]["spec"]["containers"]
    return list(next(c for c in containers if c["name"] == "specops-sidecar")["args"])


def test_the_sidecar_predicts_up_to_the_engines_batch_limit() -> None:
    # The default limit is the sidecar's own default, so its pod template stays as it was.
    assert "--max-num-seqs" not in _sidecar_args(_render(SPEC))
    wide = {**SPEC, "engine": {**SPEC["engine"], "maxNumSeqs": 1024}}
    objects = _render(wide)
    for args in (_args(objects), _sidecar_args(objects)):  # the engine's and the sidecar's
        assert args[args.index("--max-num-seqs") + 1] == "1024"
    sidecar = dry_parse(["specops", "sidecar", *_sidecar_args(objects)])
    assert sidecar.params["max_num_seqs"] == 1024
