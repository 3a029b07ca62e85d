"""Bad specs are refused with a message naming the field and the fix, identically by the
pydantic models (operator) and the CRD's CEL rules (API server, evaluated here with celpy)."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import celpy.adapter
import pytest

from specops.api import crd, parse_service, parse_spec
from specops.errors import SpecValidationError

GOOD: dict[str, Any] = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "speculation": {"method": "eagle3", "draftModel": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
}


def _with(path: str, value: Any, base: dict[str, Any] = GOOD) -> dict[str, Any]:
    """A copy of ``base`` with the dotted ``path`` set to ``value`` (None removes it)."""
    spec = copy.deepcopy(base)
    *parents, leaf = path.split(".")
    node = spec
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return spec


def _merge(*changes: tuple[str, Any]) -> dict[str, Any]:
    spec = GOOD
    for path, value in changes:
        spec = _with(path, value, spec)
    return spec


SCHEDULE = [{"minBatchSize": 1, "maxBatchSize": 64, "numSpeculativeTokens": 3}]

# (spec, start of the expected message, whether a CEL rule — not a schema bound — refuses it)
BAD: list[tuple[str, dict[str, Any], str, bool]] = [
    (
        "unknown gpu",
        _with("engine.gpu", "H100"),
        "spec.engine.gpu must name a GPU specops has the datasheet of, one of A100-SXM4-80GB",
        True,
    ),
    (
        "env HF_HOME",
        _with("engine.env", [{"name": "HF_HOME", "value": "/tmp"}]),
        "spec.engine.env: HF_HOME is set by the operator",
        True,
    ),
    (
        "env HF_TOKEN beside hfTokenSecret",
        _merge(
            ("engine.hfTokenSecret", {"name": "hf"}),
            ("engine.env", [{"name": "HF_TOKEN", "value": "hf_x"}]),
        ),
        "spec.engine.env: HF_HOME is set by the operator",
        True,
    ),
    (
        "data-parallel-size not a number",
        _with("engine.extraArgs", ["--data-parallel-size=abc"]),
        "spec.engine.extraArgs: --data-parallel-size takes a whole number of engines",
        True,
    ),
    (
        "k initial above max",
        _with("speculation.numSpeculativeTokens", {"initial": 6, "max": 5}),
        "spec.speculation.numSpeculativeTokens.initial must lie between min and max",
        True,
    ),
    (
        "k min above max",
        _with("speculation.numSpeculativeTokens", {"initial": 3, "min": 4, "max": 3}),
        "spec.speculation.numSpeculativeTokens: min must be <= max",
        True,
    ),
    (
        "eagle3 without draft",
        _with("speculation.draftModel", None),
        "spec.speculation.draftModel is required for methods dflash, draft_model, eagle, eagle3",
        True,
    ),
    (
        "draft_model without draft",
        _merge(("speculation.method", "draft_model"), ("speculation.draftModel", None)),
        "spec.speculation.draftModel is required",
        True,
    ),
    (
        "ngram with draft",
        _with("speculation.method", "ngram"),
        "spec.speculation.draftModel must be unset for methods ngram, ngram_gpu, suffix",
        True,
    ),
    (
        "suffix with draft",
        _with("speculation.method", "suffix"),
        "spec.speculation.draftModel must be unset",
        True,
    ),
    (
        "prompt lookup on eagle3",
        _with("speculation.promptLookupMax", 4),
        "spec.speculation.promptLookupMin/promptLookupMax apply only to methods ngram",
        True,
    ),
    (
        "prompt lookup min above max",
        _merge(
            ("speculation.method", "ngram"),
            ("speculation.draftModel", None),
            ("speculation.promptLookupMin", 5),
            ("speculation.promptLookupMax", 2),
        ),
        "spec.speculation.promptLookupMin must be <= promptLookupMax",
        True,
    ),
    (
        "schedule on suffix",
        _merge(
            ("speculation.method", "suffix"),
            ("speculation.draftModel", None),
            ("speculation.perBatchSizeSchedule", True),
        ),
        "spec.speculation.perBatchSizeSchedule is supported by vLLM only for methods",
        True,
    ),
    (
        "initial schedule without the switch",
        _with("speculation.initialSchedule", SCHEDULE),
        "spec.speculation.initialSchedule needs perBatchSizeSchedule: true",
        True,
    ),
    (
        "schedule not from 1",
        _merge(
            ("speculation.perBatchSizeSchedule", True),
            (
                "speculation.initialSchedule",
                [{"minBatchSize": 2, "maxBatchSize": 8, "numSpeculativeTokens": 3}],
            ),
        ),
        "spec.speculation.initialSchedule must have a range starting at batch size 1",
        True,
    ),
    (
        "overlapping schedule",
        _merge(
            ("speculation.perBatchSizeSchedule", True),
            (
                "speculation.initialSchedule",
                [*SCHEDULE, {"minBatchSize": 60, "maxBatchSize": 90, "numSpeculativeTokens": 1}],
            ),
        ),
        "spec.speculation.initialSchedule ranges must not overlap",
        True,
    ),
    (
        "schedule k above max",
        _merge(
            ("speculation.perBatchSizeSchedule", True),
            (
                "speculation.initialSchedule",
                [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 9}],
            ),
        ),
        "spec.speculation.initialSchedule: each k must be 0 or within",
        True,
    ),
    (
        "schedule all zero",
        _merge(
            ("speculation.perBatchSizeSchedule", True),
            (
                "speculation.initialSchedule",
                [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 0}],
            ),
        ),
        "spec.speculation.initialSchedule must speculate somewhere",
        True,
    ),
    (
        "inverted range",
        _merge(
            ("speculation.perBatchSizeSchedule", True),
            (
                "speculation.initialSchedule",
                [{"minBatchSize": 9, "maxBatchSize": 1, "numSpeculativeTokens": 3}],
            ),
        ),
        "speculative schedule: minBatchSize must be <= maxBatchSize",
        True,
    ),
    (
        "draft TP on ngram",
        _merge(
            ("speculation.method", "ngram"),
            ("speculation.draftModel", None),
            ("speculation.draftTensorParallelSize", 1),
        ),
        "spec.speculation.draftTensorParallelSize applies only to methods with a draft model",
        True,
    ),
    (
        "draft TP neither 1 nor TP",
        _merge(
            ("engine.gpusPerPod", 4),
            ("engine.tensorParallelSize", 4),
            ("speculation.draftTensorParallelSize", 2),
        ),
        "spec.speculation.draftTensorParallelSize must be 1 or equal to spec.engine.tensorPar",
        True,
    ),
    (
        "TP above GPUs",
        _with("engine.tensorParallelSize", 2),
        "spec.engine.tensorParallelSize must not exceed spec.engine.gpusPerPod",
        True,
    ),
    (
        "owned flag in extraArgs",
        _with("engine.extraArgs", ["--enable-prefix-caching", "--port=9000"]),
        "spec.engine.extraArgs must not carry flags the operator sets",
        True,
    ),
    (
        "shutdown timeout in extraArgs",
        _with("engine.extraArgs", ["--shutdown-timeout=30"]),
        "spec.engine.extraArgs must not carry flags the operator sets",
        True,
    ),
    (
        "grace period too short to drain",
        _with("engine.terminationGracePeriodSeconds", 10),
        "spec.engine.terminationGracePeriodSeconds: Input should be greater than or equal to 15",
        False,
    ),
    (
        "speculative config in extraArgs",
        _with("engine.extraArgs", ["-sc", "{}"]),
        "spec.engine.extraArgs must not carry flags the operator sets",
        True,
    ),
    (
        "duplicate env",
        _with("engine.env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
        "spec.engine.env: variable names must be unique",
        True,
    ),
    (
        "env value and valueFrom",
        _with("engine.env", [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {}}}]),
        "spec.engine.env: an entry may set value or valueFrom, not both",
        True,
    ),
    (
        "GPU in resources",
        _with("engine.resources", {"limits": {"nvidia.com/gpu": 2}}),
        "spec.engine.resources.limits must not set nvidia.com/gpu",
        True,
    ),
    (
        "PVC and emptyDir size",
        _with("engine.modelCache", {"claimName": "cache", "sizeLimit": "100Gi"}),
        "spec.engine.modelCache: set claimName",
        True,
    ),
    (
        "toleration Exists with value",
        _with("engine.tolerations", [{"key": "gpu", "operator": "Exists", "value": "x"}]),
        "spec.engine.tolerations: operator Exists takes no value",
        True,
    ),
    (
        "goodput without TPOT",
        _with("policy", {"objective": "Goodput"}),
        "spec.policy.tpotTargetMilliseconds is required for objective Goodput",
        True,
    ),
    (
        "dwell shorter than window",
        _with("policy", {"evaluationWindowSeconds": 600, "minDwellSeconds": 300}),
        "spec.policy.minDwellSeconds must be >= evaluationWindowSeconds",
        True,
    ),
    (
        "prometheus without URL",
        _with("metrics", {"source": "Prometheus"}),
        "spec.metrics.prometheusUrl is required when source is Prometheus",
        True,
    ),
    (
        "URL without prometheus",
        _with("metrics", {"prometheusUrl": "http://prom:9090"}),
        "spec.metrics.prometheusUrl is only used when source is Prometheus",
        True,
    ),
    (
        "unknown method",
        _with("speculation.method", "medusa"),
        "spec.speculation.method: Input should be",
        False,
    ),
    (
        "unknown mode",
        _with("speculation.mode", "Sometimes"),
        "spec.speculation.mode: Input should be",
        False,
    ),
    (
        "negative replicas",
        _with("replicas", -1),
        "spec.replicas: Input should be greater than or equal to 0",
        False,
    ),
    (
        "k of 40",
        _with("speculation.numSpeculativeTokens", {"initial": 40, "max": 40}),
        "spec.speculation.numSpeculativeTokens.initial: Input should be less than or equal to 32",
        False,
    ),
    (
        "empty model",
        _with("model", ""),
        "spec.model: String should have at least 1 character",
        False,
    ),
    ("missing speculation", _with("speculation", None), "spec.speculation: Field required", False),
    (
        "typo in a field",
        _with("engine.gpuPerPod", 2),
        "spec.engine.gpuPerPod: Extra inputs are not permitted",
        False,
    ),
    ("bad quantity", _with("engine.shmSize", "lots"), "spec.engine.shmSize", False),
    (
        "bad Prometheus URL",
        _with("metrics", {"source": "Prometheus", "prometheusUrl": "prom:9090"}),
        "spec.metrics.prometheusUrl: String should match pattern",
        False,
    ),
]


@pytest.mark.parametrize(("spec", "message"), [(b[1], b[2]) for b in BAD], ids=[b[0] for b in BAD])
def test_models_refuse_bad_specs_with_their_message(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecValidationError) as caught:
        parse_spec(spec)
    assert any(line.startswith(message) for line in str(caught.value).splitlines()), str(
        caught.value
    )


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]  # type: ignore[no-any-return]


def _defaulted(schema: dict[str, Any], value: Any) -> Any:
    """Kubernetes' structural defaulting: fill absent properties that have a default."""
    if isinstance(value, dict) and "properties" in schema:
        filled = dict(value)
        for name, child in schema["properties"].items():
            if name not in filled and "default" in child:
                filled[name] = copy.deepcopy(child["default"])
            if name in filled:
                filled[name] = _defaulted(child, filled[name])
        return filled
    if isinstance(value, list) and "items" in schema:
        return [_defaulted(schema["items"], item) for item in value]
    return value


def _cel_failures(schema: dict[str, Any], value: Any) -> list[str]:
    """Messages of every x-kubernetes-validations rule that ``value`` breaks, depth first."""
    failures: list[str] = []
    if isinstance(value, dict) and "properties" in schema:
        for name, child in schema["properties"].items():
            if name in value:
                failures += _cel_failures(child, value[name])
    if isinstance(value, list) and "items" in schema:
        for item in value:
            failures += _cel_failures(schema["items"], item)
    env = celpy.Environment()
    for rule in schema.get("x-kubernetes-validations", []):
        program = env.program(env.compile(rule["rule"]))
        if not program.evaluate({"self": celpy.adapter.json_to_cel(value)}):
            failures.append(rule["message"])
    return failures


@pytest.mark.parametrize(
    ("spec", "message"), [(b[1], b[2]) for b in BAD if b[3]], ids=[b[0] for b in BAD if b[3]]
)
def test_cel_rules_refuse_the_same_specs_with_the_same_message(
    spec: dict[str, Any], message: str
) -> None:
    failures = _cel_failures(_schema(), _defaulted(_schema(), spec))
    assert any(failure.startswith(message) for failure in failures), failures


GOOD_SPECS = [
    GOOD,
    _merge(
        ("speculation.method", "ngram"),
        ("speculation.draftModel", None),
        ("speculation.promptLookupMin", 2),
        ("speculation.promptLookupMax", 4),
    ),
    _merge(("speculation.method", "mtp"), ("speculation.draftModel", None)),
    _merge(
        ("speculation.perBatchSizeSchedule", True),
        (
            "speculation.initialSchedule",
            [*SCHEDULE, {"minBatchSize": 65, "maxBatchSize": 256, "numSpeculativeTokens": 0}],
        ),
    ),
    _merge(
        ("engine.gpusPerPod", 4),
        ("engine.tensorParallelSize", 4),
        ("speculation.draftTensorParallelSize", 4),
        ("engine.extraArgs", ["--enable-prefix-caching", "--gpu-memory-utilization=0.9"]),
        ("engine.terminationGracePeriodSeconds", 600),
    ),
    _merge(
        ("policy", {"objective": "Goodput", "tpotTargetMilliseconds": 40}),
        ("metrics", {"source": "Prometheus", "prometheusUrl": "http://prometheus.monitoring:9090"}),
    ),
]


@pytest.mark.parametrize("spec", GOOD_SPECS)
def test_good_specs_pass_both_checks(spec: dict[str, Any]) -> None:
    parsed = parse_spec(spec)
    assert _cel_failures(_schema(), _defaulted(_schema(), spec)) == []
    dumped = parsed.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert _cel_failures(_schema(), dumped) == []
    assert parse_spec(dumped) == parsed


def test_a_whole_manifest_is_checked_too() -> None:
    with pytest.raises(SpecValidationError, match="kind must be SpeculativeService"):
        parse_service({"kind": "Deployment"})
    with pytest.raises(SpecValidationError, match=r"^metadata.name: Field required"):
        parse_service({"kind": "SpeculativeService", "metadata": {}, "spec": GOOD})


@pytest.mark.parametrize(
    "name",
    [
        "llama.v2",  # no Service can carry a dot
        "a" * 64,  # label values stop at 63
        "7b-llama",  # a Service's name starts with a letter
        "llama-",
    ],
)
def test_a_name_no_child_can_carry_is_refused_by_the_model_and_the_api_server(name: str) -> None:
    manifest = {"kind": "SpeculativeService", "metadata": {"name": name}, "spec": GOOD}
    with pytest.raises(SpecValidationError, match=r"metadata.name must be at most 63"):
        parse_service(manifest)
    root = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    env = celpy.Environment()
    (rule,) = root["x-kubernetes-validations"]
    program = env.program(env.compile(rule["rule"]))
    assert not program.evaluate({"self": celpy.adapter.json_to_cel(manifest)})
    fine = {**manifest, "metadata": {"name": "llama-3-8b"}}
    assert program.evaluate({"self": celpy.adapter.json_to_cel(fine)})
    assert parse_service(fine).metadata.name == "llama-3-8b"
