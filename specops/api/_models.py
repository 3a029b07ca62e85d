"""The SpeculativeService API (specops.io/v1alpha1): spec and status as typed models.

These models are the single definition of the API: the CRD's schema is generated from
them (see ``_crd.py``), the operator parses objects with them, and their ``__rules__`` are
the CEL rules the API server enforces.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from specops.api._rules import CrdModel, Rule
from specops.control import ControlSettings
from specops.profiles import gpu_names, profile_names
from specops.vllm import (
    DYNAMIC_SCHEDULE_METHODS,
    MAX_NUM_SEQS_DEFAULT,
    METHODS_NEEDING_DRAFT_MODEL,
    METHODS_REFUSING_DRAFT_MODEL,
    VLLM_VERSION,
    SpeculationMethod,
    flag_pattern,
    sets_flag,
)

# The control loop's defaults are the API's: one source for both.
_LOOP = ControlSettings()

__all__ = [
    "GROUP",
    "KIND",
    "OWNED_FLAGS",
    "PLURAL",
    "VERSION",
    "BatchSizeRange",
    "BatchWeight",
    "Condition",
    "ConditionType",
    "ControllerStatus",
    "CrossoverStatus",
    "DecisionStatus",
    "EngineSpec",
    "EnvVar",
    "Measurements",
    "MetricsSpec",
    "ModelCacheSpec",
    "ObjectMeta",
    "PolicySpec",
    "RegimeStatus",
    "ResourceRequirements",
    "RolloutStatus",
    "SecretKeyRef",
    "SpeculationChoice",
    "SpeculationMode",
    "SpeculationSpec",
    "SpeculativeConfigStatus",
    "SpeculativeService",
    "SpeculativeServiceSpec",
    "SpeculativeServiceStatus",
    "SpeculativeTokens",
    "Toleration",
]

GROUP = "specops.io"
VERSION = "v1alpha1"
KIND = "SpeculativeService"
PLURAL = "speculativeservices"

# vLLM flags the operator sets itself; extraArgs may not carry them (or their aliases).
OWNED_FLAGS: tuple[str, ...] = (
    "--model",
    "--port",
    "--host",
    "--served-model-name",
    "--tensor-parallel-size",
    "-tp",
    "--max-num-seqs",
    "--max-model-len",
    "--speculative-config",
    "-sc",
    "--spec-method",
    "--spec-model",
    "--spec-tokens",
    "--shutdown-timeout",
)
# What extraArgs may not carry: the owned flags, and --config, whose file can set any flag.
REFUSED_FLAGS: tuple[str, ...] = (*OWNED_FLAGS, "--config")
_REFUSED_FLAGS_RE = flag_pattern(REFUSED_FLAGS)

_DP_RE = "^--data-parallel-size=[1-9][0-9]{0,3}$"
SpeculationMode = Literal["Auto", "Advise", "Fixed", "Off"]
ConditionType = Literal["Ready", "Progressing", "Degraded", "MetricsAvailable", "SpeculationActive"]

Name = Annotated[str, StringConstraints(min_length=1, max_length=253)]
DnsName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
]
ShortText = Annotated[str, StringConstraints(max_length=1024)]
ModelId = Annotated[str, StringConstraints(min_length=1, max_length=512)]
Url = Annotated[str, StringConstraints(max_length=2048, pattern=r"^https?://[^\s]+$")]
Timestamp = Annotated[
    str, StringConstraints(max_length=64), Field(json_schema_extra={"format": "date-time"})
]
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
Quantity = Annotated[
    int | Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN)],
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]
GPU_RESOURCE = "nvidia.com/gpu"


def _quoted(names: frozenset[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{name}'" for name in sorted(names)) + "]"


_GPUS = _quoted(gpu_names())


def _listed(names: frozenset[str]) -> str:
    return ", ".join(sorted(names))


class SecretKeyRef(CrdModel):
    """A key in a Secret of the SpeculativeService's namespace."""

    name: DnsName
    """Name of the Secret."""
    key: Annotated[str, StringConstraints(min_length=1, max_length=253)] = "token"
    """Key within the Secret whose value is used."""


class LocalSecretReference(CrdModel):
    """A Secret of the SpeculativeService's namespace, named as Kubernetes names one."""

    name: DnsName
    """Name of the Secret."""


class EnvVar(CrdModel):
    """An environment variable of the vLLM container."""

    __rules__ = (
        Rule(
            cel="!(has(self.value) && has(self.valueFrom))",
            message="spec.engine.env: an entry may set value or valueFrom, not both; keep one",
            holds=lambda e: e.value is None or e.value_from is None,
        ),
    )

    name: Annotated[
        str,
        StringConstraints(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"),
    ]
    """Variable name."""
    value: Annotated[str, StringConstraints(max_length=32768)] | None = None
    """Literal value."""
    value_from: dict[str, Any] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )
    """Source of the value: a Kubernetes EnvVarSource (secretKeyRef, fieldRef, ...)."""


class ResourceRequirements(CrdModel):
    """CPU and memory for the vLLM container; GPUs come from gpusPerPod."""

    __rules__ = (
        Rule(
            cel=f"!has(self.limits) || !('{GPU_RESOURCE}' in self.limits)",
            message=(
                f"spec.engine.resources.limits must not set {GPU_RESOURCE}: use "
                f"spec.engine.gpusPerPod"
            ),
            holds=lambda r: GPU_RESOURCE not in (r.limits or {}),
            field_path=".limits",
        ),
        Rule(
            cel=f"!has(self.requests) || !('{GPU_RESOURCE}' in self.requests)",
            message=(
                f"spec.engine.resources.requests must not set {GPU_RESOURCE}: use "
                f"spec.engine.gpusPerPod"
            ),
            holds=lambda r: GPU_RESOURCE not in (r.requests or {}),
            field_path=".requests",
        ),
    )

    requests: dict[str, Quantity] | None = Field(default=None, max_length=16)
    """Minimum resources (e.g. cpu: 8, memory: 64Gi)."""
    limits: dict[str, Quantity] | None = Field(default=None, max_length=16)
    """Maximum resources (e.g. memory: 96Gi)."""


class EngineSecurityContext(CrdModel):
    """Who the vLLM container runs as. The operator always drops every capability, forbids
    privilege escalation and sets seccomp RuntimeDefault; with runAsNonRoot (and a user, for
    an image that defaults to root, as vLLM's does) the pods pass Pod Security "restricted"."""

    run_as_non_root: bool | None = None
    """Refuse to start the container as root (Pod Security "restricted" requires it)."""
    run_as_user: int | None = Field(default=None, ge=1, le=2_147_483_647)
    """UID of the vLLM process (vLLM's image runs as root unless this is set)."""
    run_as_group: int | None = Field(default=None, ge=0, le=2_147_483_647)
    """GID of the vLLM process."""
    fs_group: int | None = Field(default=None, ge=0, le=2_147_483_647)
    """Group that owns the pod's volumes, so a non-root vLLM can write the model cache."""


class Toleration(CrdModel):
    """A Kubernetes toleration, to schedule onto tainted GPU nodes."""

    __rules__ = (
        Rule(
            cel="self.operator != 'Exists' || !has(self.value)",
            message=(
                "spec.engine.tolerations: operator Exists takes no value; remove value or use Equal"
            ),
            holds=lambda t: t.operator != "Exists" or t.value is None,
        ),
    )

    key: Annotated[str, StringConstraints(max_length=317)] | None = None
    """Taint key to tolerate; empty with operator Exists tolerates every taint."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """How key and value are compared to the taint."""
    value: Annotated[str, StringConstraints(max_length=63)] | None = None
    """Taint value to match with operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to tolerate; unset tolerates every effect."""
    toleration_seconds: int | None = Field(default=None, ge=0)
    """How long a NoExecute taint is tolerated before eviction."""


class ModelCacheSpec(CrdModel):
    """Where model weights are cached: a PersistentVolumeClaim, or an emptyDir."""

    __rules__ = (
        Rule(
            cel="!(has(self.claimName) && has(self.sizeLimit))",
            message=(
                "spec.engine.modelCache: set claimName (a PersistentVolumeClaim) or sizeLimit (an "
                "emptyDir), not both"
            ),
            holds=lambda c: c.claim_name is None or c.size_limit is None,
        ),
    )

    claim_name: DnsName | None = None
    """PersistentVolumeClaim holding the Hugging Face cache; unset uses an emptyDir."""
    size_limit: Quantity | None = None
    """Size limit of the emptyDir cache (when claimName is unset)."""
    mount_path: Annotated[str, StringConstraints(max_length=1024, pattern=r"^/.*$")] = (
        "/root/.cache/huggingface"
    )
    """Mount path of the cache in the vLLM container (HF_HOME)."""


class EngineSpec(CrdModel):
    """The vLLM server: image, parallelism, limits and pod placement."""

    __rules__ = (
        Rule(
            cel="self.tensorParallelSize <= self.gpusPerPod",
            message=(
                "spec.engine.tensorParallelSize must not exceed spec.engine.gpusPerPod: each "
                "tensor-parallel rank needs a GPU"
            ),
            holds=lambda e: e.tensor_parallel_size <= e.gpus_per_pod,
            field_path=".tensorParallelSize",
        ),
        Rule(
            cel=f"!has(self.gpu) || self.gpu in {_GPUS}",
            message="spec.engine.gpu must name a GPU specops has the datasheet of, one of "
            + ", ".join(gpu_names()),
            holds=lambda e: e.gpu is None or e.gpu in gpu_names(),
            field_path=".gpu",
        ),
        Rule(
            cel=f"!has(self.extraArgs) || self.extraArgs.all(a, !a.matches('{_REFUSED_FLAGS_RE}'))",
            message="spec.engine.extraArgs must not carry flags the operator sets ("
            + ", ".join(OWNED_FLAGS)
            + "), in any spelling vLLM reads (underscores, abbreviations, dotted keys), nor "
            "--config (its file can set them): use the matching spec field instead",
            holds=lambda e: not any(sets_flag(arg, REFUSED_FLAGS) for arg in e.extra_args),
            field_path=".extraArgs",
        ),
        Rule(
            cel="!has(self.env) || self.env.all(e, self.env.exists_one(f, f.name == e.name))",
            message="spec.engine.env: variable names must be unique; merge the duplicates",
            holds=lambda e: len({v.name for v in e.env}) == len(e.env),
            field_path=".env",
        ),
        Rule(
            cel=(
                "!has(self.env) || self.env.all(e, e.name != 'HF_HOME' && "
                "(e.name != 'HF_TOKEN' || !has(self.hfTokenSecret)))"
            ),
            message=(
                "spec.engine.env: HF_HOME is set by the operator from "
                "spec.engine.modelCache.mountPath, and HF_TOKEN from spec.engine.hfTokenSecret; "
                "remove the entry"
            ),
            holds=lambda e: (
                not any(
                    v.name == "HF_HOME" or (v.name == "HF_TOKEN" and e.hf_token_secret is not None)
                    for v in e.env
                )
            ),
            field_path=".env",
        ),
        Rule(
            cel=(
                "!has(self.extraArgs) || self.extraArgs.all(a, "
                f"!a.startsWith('--data-parallel-size=') || a.matches('{_DP_RE}'))"
            ),
            message=(
                "spec.engine.extraArgs: --data-parallel-size takes a whole number of engines "
                "(e.g. --data-parallel-size=2)"
            ),
            holds=lambda e: all(
                not a.startswith("--data-parallel-size=") or re.fullmatch(_DP_RE, a) is not None
                for a in e.extra_args
            ),
            field_path=".extraArgs",
        ),
    )

    image: Annotated[str, StringConstraints(min_length=1, max_length=512)] = (
        f"vllm/vllm-openai:v{VLLM_VERSION}"
    )
    """vLLM server image, pinned to a release (its --speculative-config must match vLLM 0.33.0)."""
    gpus_per_pod: int = Field(default=1, ge=1, le=16)
    """GPUs (nvidia.com/gpu) requested and limited per pod."""
    tensor_parallel_size: int = Field(default=1, ge=1, le=16)
    """vLLM --tensor-parallel-size."""
    gpu: Annotated[str, StringConstraints(max_length=64)] | None = None
    """The GPU the pods run on, one of the datasheets specops ships: with it, a model the
    profile catalog lacks gets a step-time prior derived from its shape and the GPU."""
    max_num_seqs: int = Field(default=MAX_NUM_SEQS_DEFAULT, ge=1, le=65536)
    """vLLM --max-num-seqs: the most requests decoded in one batch."""
    max_model_len: int | None = Field(default=None, ge=16, le=16_777_216)
    """vLLM --max-model-len; unset takes the model's own context length."""
    extra_args: list[Annotated[str, StringConstraints(min_length=1, max_length=1024)]] = Field(
        default=[], max_length=64
    )
    """Further vLLM arguments, appended to the command (not ones the operator owns)."""
    env: list[EnvVar] = Field(default=[], max_length=64)
    """Extra environment variables of the vLLM container."""
    resources: ResourceRequirements | None = None
    """CPU and memory requests and limits of the vLLM container."""
    node_selector: dict[str, Annotated[str, StringConstraints(max_length=63)]] | None = Field(
        default=None, max_length=32
    )
    """Node labels the pods must match (e.g. a GPU product)."""
    tolerations: list[Toleration] = Field(default=[], max_length=32)
    """Tolerations of the pods."""
    model_cache: ModelCacheSpec = ModelCacheSpec()
    """Model weight cache volume."""
    hf_token_secret: SecretKeyRef | None = None
    """Secret with a Hugging Face token, exposed to vLLM as HF_TOKEN."""
    security_context: EngineSecurityContext | None = None
    """Who the vLLM container runs as (set runAsNonRoot and runAsUser for Pod Security
    "restricted")."""
    image_pull_secrets: list[LocalSecretReference] = Field(default=[], max_length=16)
    """Secrets of type kubernetes.io/dockerconfigjson for pulling the vLLM and sidecar images
    from a private registry or mirror."""
    shm_size: Quantity = "8Gi"
    """Size of the /dev/shm memory emptyDir (NCCL and tensor parallelism use it)."""
    termination_grace_period_seconds: int = Field(default=120, ge=15, le=3600)
    """Pod grace period: a 5 s preStop pause, then vLLM drains requests for up to this less 10 s."""


class SpeculativeTokens(CrdModel):
    """Draft tokens per step (k): the starting value and the range the controller may use."""

    __rules__ = (
        Rule(
            cel="self.min <= self.max",
            message=(
                "spec.speculation.numSpeculativeTokens: min must be <= max; lower min or raise max"
            ),
            holds=lambda t: t.min <= t.max,
            field_path=".min",
        ),
        Rule(
            cel="self.initial >= self.min && self.initial <= self.max",
            message=(
                "spec.speculation.numSpeculativeTokens.initial must lie between min and max; "
                "change initial or widen the range"
            ),
            holds=lambda t: t.min <= t.initial <= t.max,
            field_path=".initial",
        ),
    )

    initial: int = Field(default=3, ge=1, le=32)
    """k the pods start with (and keep, in mode Fixed)."""
    min: int = Field(default=1, ge=1, le=32)
    """Smallest k the controller may choose while speculation is on."""
    max: int = Field(default=5, ge=1, le=32)
    """Largest k the controller may choose; also vLLM's num_speculative_tokens with a schedule."""


class BatchSizeRange(CrdModel):
    """One entry of vLLM's num_speculative_tokens_per_batch_size: k for a batch-size range."""

    __rules__ = (
        Rule(
            cel="self.minBatchSize <= self.maxBatchSize",
            message="speculative schedule: minBatchSize must be <= maxBatchSize in every range",
            holds=lambda r: r.min_batch_size <= r.max_batch_size,
            field_path=".minBatchSize",
        ),
    )

    min_batch_size: int = Field(ge=1, le=65536)
    """First batch size of the range."""
    max_batch_size: int = Field(ge=1, le=65536)
    """Last batch size of the range (inclusive)."""
    num_speculative_tokens: int = Field(ge=0, le=32)
    """k for batches in this range; 0 turns drafting off there."""


def _overlap(a: BatchSizeRange, b: BatchSizeRange) -> bool:
    return a.min_batch_size <= b.max_batch_size and a.max_batch_size >= b.min_batch_size


_PROFILES = _quoted(profile_names())
_NEEDS_DRAFT = _quoted(METHODS_NEEDING_DRAFT_MODEL)
_REFUSES_DRAFT = _quoted(METHODS_REFUSING_DRAFT_MODEL)
_NGRAM = ("ngram", "ngram_gpu")


class SpeculationSpec(CrdModel):
    """Which speculative decoding method runs, and how the operator may tune it."""

    __rules__ = (
        Rule(
            cel=f"has(self.draftModel) || !(self.method in {_NEEDS_DRAFT})",
            message="spec.speculation.draftModel is required for methods "
            + _listed(METHODS_NEEDING_DRAFT_MODEL)
            + ": set it to the draft checkpoint (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B)",
            holds=lambda s: (
                s.draft_model is not None or s.method not in METHODS_NEEDING_DRAFT_MODEL
            ),
            field_path=".draftModel",
        ),
        Rule(
            cel=f"!has(self.draftModel) || !(self.method in {_REFUSES_DRAFT})",
            message="spec.speculation.draftModel must be unset for methods "
            + _listed(METHODS_REFUSING_DRAFT_MODEL)
            + " (they draft from the text itself): remove draftModel or pick a model-based method",
            holds=lambda s: s.draft_model is None or s.method not in METHODS_REFUSING_DRAFT_MODEL,
            field_path=".draftModel",
        ),
        Rule(
            cel=f"!has(self.draftTensorParallelSize) || !(self.method in {_REFUSES_DRAFT})",
            message=(
                "spec.speculation.draftTensorParallelSize applies only to methods with a draft "
                "model: remove it"
            ),
            holds=lambda s: (
                s.draft_tensor_parallel_size is None or s.method not in METHODS_REFUSING_DRAFT_MODEL
            ),
            field_path=".draftTensorParallelSize",
        ),
        Rule(
            cel=(
                "(!has(self.promptLookupMin) && !has(self.promptLookupMax)) || "
                f"self.method in {_quoted(_NGRAM)}"
            ),
            message=(
                "spec.speculation.promptLookupMin/promptLookupMax apply only to methods ngram and "
                "ngram_gpu: remove them"
            ),
            holds=lambda s: (
                (s.prompt_lookup_min is None and s.prompt_lookup_max is None) or s.method in _NGRAM
            ),
        ),
        Rule(
            cel=(
                "!has(self.promptLookupMin) || !has(self.promptLookupMax) || "
                "self.promptLookupMin <= self.promptLookupMax"
            ),
            message="spec.speculation.promptLookupMin must be <= promptLookupMax",
            holds=lambda s: (
                s.prompt_lookup_min is None
                or s.prompt_lookup_max is None
                or s.prompt_lookup_min <= s.prompt_lookup_max
            ),
            field_path=".promptLookupMin",
        ),
        Rule(
            cel=f"!self.perBatchSizeSchedule || self.method in {_quoted(DYNAMIC_SCHEDULE_METHODS)}",
            message="spec.speculation.perBatchSizeSchedule is supported by vLLM only for methods "
            + _listed(DYNAMIC_SCHEDULE_METHODS)
            + ": set it to false or change the method",
            holds=lambda s: not s.per_batch_size_schedule or s.method in DYNAMIC_SCHEDULE_METHODS,
            field_path=".perBatchSizeSchedule",
        ),
        Rule(
            cel="!has(self.initialSchedule) || self.perBatchSizeSchedule",
            message=(
                "spec.speculation.initialSchedule needs perBatchSizeSchedule: true; set it or "
                "remove initialSchedule"
            ),
            holds=lambda s: s.initial_schedule is None or s.per_batch_size_schedule,
            field_path=".initialSchedule",
        ),
        Rule(
            cel="!has(self.initialSchedule) || self.initialSchedule.exists(r, r.minBatchSize == 1)",
            message="spec.speculation.initialSchedule must have a range starting at batch size 1",
            holds=lambda s: (
                s.initial_schedule is None or any(r.min_batch_size == 1 for r in s.initial_schedule)
            ),
            field_path=".initialSchedule",
        ),
        Rule(
            cel=(
                "!has(self.initialSchedule) || self.initialSchedule.all(r, "
                "self.initialSchedule.exists_one(q, "
                "q.minBatchSize <= r.maxBatchSize && q.maxBatchSize >= r.minBatchSize))"
            ),
            message=(
                "spec.speculation.initialSchedule ranges must not overlap; make each batch size "
                "belong to one range"
            ),
            holds=lambda s: (
                s.initial_schedule is None
                or all(
                    sum(_overlap(q, r) for q in s.initial_schedule) == 1 for r in s.initial_schedule
                )
            ),
            field_path=".initialSchedule",
        ),
        Rule(
            cel=(
                "!has(self.initialSchedule) || self.initialSchedule.all(r, "
                "r.numSpeculativeTokens == 0 || "
                "(r.numSpeculativeTokens >= self.numSpeculativeTokens.min && "
                "r.numSpeculativeTokens <= self.numSpeculativeTokens.max))"
            ),
            message=(
                "spec.speculation.initialSchedule: each k must be 0 or within "
                "numSpeculativeTokens min..max"
            ),
            holds=lambda s: (
                s.initial_schedule is None
                or all(
                    r.num_speculative_tokens == 0
                    or s.num_speculative_tokens.min
                    <= r.num_speculative_tokens
                    <= s.num_speculative_tokens.max
                    for r in s.initial_schedule
                )
            ),
            field_path=".initialSchedule",
        ),
        Rule(
            cel=(
                "!has(self.initialSchedule) || self.initialSchedule.exists(r, "
                "r.numSpeculativeTokens > 0)"
            ),
            message=(
                "spec.speculation.initialSchedule must speculate somewhere (a k > 0); use mode "
                "Off to turn speculation off"
            ),
            holds=lambda s: (
                s.initial_schedule is None
                or any(r.num_speculative_tokens > 0 for r in s.initial_schedule)
            ),
            field_path=".initialSchedule",
        ),
    )

    method: SpeculationMethod
    """vLLM speculative method (vLLM 0.33.0 names)."""
    draft_model: ModelId | None = None
    """Draft model, EAGLE head or MTP checkpoint (Hugging Face id or path)."""
    mode: SpeculationMode = "Auto"
    """Auto: retune speculation; Advise: only recommend; Fixed: keep spec values; Off: none."""
    num_speculative_tokens: SpeculativeTokens = SpeculativeTokens()
    """Draft tokens per step (k)."""
    per_batch_size_schedule: bool = False
    """Use vLLM's num_speculative_tokens_per_batch_size: k follows the running batch size."""
    initial_schedule: list[BatchSizeRange] | None = Field(default=None, min_length=1, max_length=16)
    """Starting schedule when perBatchSizeSchedule is on; unset: k = initial for every batch."""
    prompt_lookup_min: int | None = Field(default=None, ge=1, le=64)
    """Smallest n-gram matched in the prompt (ngram methods)."""
    prompt_lookup_max: int | None = Field(default=None, ge=1, le=64)
    """Largest n-gram matched in the prompt (ngram methods)."""
    draft_tensor_parallel_size: int | None = Field(default=None, ge=1, le=16)
    """Tensor-parallel size of the draft model: 1 or the target's tensorParallelSize."""


class CanarySpec(CrdModel):
    """Measuring a change on one pod before the fleet follows (two or more replicas)."""

    __rules__ = (
        Rule(
            cel="self.maxWindows >= self.windows",
            message="spec.policy.canary.maxWindows must be >= windows",
            holds=lambda c: c.max_windows >= c.windows,
            field_path=".maxWindows",
        ),
    )

    enabled: bool = _LOOP.canary
    """With two or more replicas, run a change on one pod first and compare it with the rest
    on the same traffic; false changes the whole fleet on the prediction alone."""
    windows: int = Field(default=_LOOP.canary_windows, ge=2, le=64)
    """Evaluation windows compared before the canary can pass or fail."""
    max_windows: int = Field(default=_LOOP.canary_max_windows, ge=2, le=64)
    """Evaluation windows after which a canary that proved nothing is rolled back."""


class PolicySpec(CrdModel):
    """What the slow control loop optimises and how cautiously it reconfigures."""

    __rules__ = (
        Rule(
            cel="self.objective != 'Goodput' || has(self.tpotTargetMilliseconds)",
            message=(
                "spec.policy.tpotTargetMilliseconds is required for objective Goodput: set the "
                "TPOT target"
            ),
            holds=lambda p: p.objective != "Goodput" or p.tpot_target_milliseconds is not None,
            field_path=".tpotTargetMilliseconds",
        ),
        Rule(
            cel="self.minDwellSeconds >= self.evaluationWindowSeconds",
            message=(
                "spec.policy.minDwellSeconds must be >= evaluationWindowSeconds: a decision needs "
                "one full window measured under the current config"
            ),
            holds=lambda p: p.min_dwell_seconds >= p.evaluation_window_seconds,
            field_path=".minDwellSeconds",
        ),
        Rule(
            cel=f"!has(self.performanceProfile) || self.performanceProfile in {_PROFILES}",
            message="spec.policy.performanceProfile must name a known profile, one of "
            + ", ".join(profile_names()),
            holds=lambda p: (
                p.performance_profile is None or p.performance_profile in profile_names()
            ),
            field_path=".performanceProfile",
        ),
    )

    objective: Literal["Throughput", "Latency", "Goodput"] = "Throughput"
    """Throughput: most tokens/s; Latency: lowest TPOT; Goodput: tokens/s within the TPOT target."""
    tpot_target_milliseconds: float | None = Field(default=None, gt=0, le=60000)
    """Time-per-output-token target in milliseconds (required for Goodput)."""
    min_gain_percent: float = Field(default=_LOOP.min_gain * 100, ge=0, le=1000)
    """Smallest predicted gain, in percent, that justifies restarting pods."""
    evaluation_window_seconds: int = Field(default=300, ge=30, le=86400)
    """Length of the measurement window behind each decision."""
    min_dwell_seconds: int = Field(default=int(_LOOP.min_dwell_s), ge=30, le=604800)
    """Least time between two reconfigurations."""
    max_reconfigurations_per_hour: int = Field(
        default=_LOOP.max_reconfigurations_per_hour, ge=0, le=60
    )
    """Cap on reconfigurations in any hour; 0 never reconfigures."""
    performance_profile: Annotated[str, StringConstraints(max_length=128)] | None = None
    """Step-cost profile the predictions start from; unset picks the one of spec.model."""
    restart_cost_seconds: int = Field(default=int(_LOOP.restart_cost_s), ge=0, le=86400)
    """Estimated seconds of service a restart costs, until rollouts have been measured."""
    restart_margin: float = Field(default=_LOOP.margin, ge=0, le=100)
    """How many times its lost service a restart's gain over the regime must make up."""
    rollout_timeout_seconds: int = Field(default=int(_LOOP.rollout_timeout_s), ge=60, le=86400)
    """Time new pods get to become Ready before the previous config is restored."""
    rollback_cooldown_seconds: int = Field(default=int(_LOOP.rollback_cooldown_s), ge=0, le=604800)
    """After a rollback, how long the restored config is kept before trying again."""
    canary: CanarySpec = CanarySpec()
    """Whether and how long a change is measured on one pod before the fleet follows."""


class MetricsSpec(CrdModel):
    """Where the sidecar reads vLLM's metrics."""

    __rules__ = (
        Rule(
            cel="self.source != 'Prometheus' || has(self.prometheusUrl)",
            message=(
                "spec.metrics.prometheusUrl is required when source is Prometheus: set the "
                "Prometheus base URL"
            ),
            holds=lambda m: m.source != "Prometheus" or m.prometheus_url is not None,
            field_path=".prometheusUrl",
        ),
        Rule(
            cel="self.source == 'Prometheus' || !has(self.prometheusUrl)",
            message=(
                "spec.metrics.prometheusUrl is only used when source is Prometheus: remove it or "
                "set source: Prometheus"
            ),
            holds=lambda m: m.source == "Prometheus" or m.prometheus_url is None,
            field_path=".prometheusUrl",
        ),
    )

    source: Literal["Direct", "Prometheus"] = "Direct"
    """Direct: the sidecar scrapes the pod's /metrics; Prometheus: it queries Prometheus."""
    prometheus_url: Url | None = None
    """Prometheus base URL (e.g. http://prometheus-operated.monitoring:9090)."""
    scrape_interval_seconds: int = Field(default=15, ge=1, le=300)
    """How often the sidecar samples the metrics."""


class SpeculativeServiceSpec(CrdModel):
    """Desired state of a SpeculativeService: a vLLM deployment with speculative decoding."""

    __rules__ = (
        Rule(
            cel=(
                "!has(self.speculation.draftTensorParallelSize) || "
                "self.speculation.draftTensorParallelSize == 1 "
                "|| self.speculation.draftTensorParallelSize == self.engine.tensorParallelSize"
            ),
            message=(
                "spec.speculation.draftTensorParallelSize must be 1 or equal to "
                "spec.engine.tensorParallelSize"
            ),
            holds=lambda s: (
                s.speculation.draft_tensor_parallel_size in (None, 1, s.engine.tensor_parallel_size)
            ),
            field_path=".speculation.draftTensorParallelSize",
        ),
    )

    model: ModelId
    """Target model to serve (Hugging Face id or path), passed to vllm serve."""
    served_model_name: Annotated[str, StringConstraints(min_length=1, max_length=512)] | None = None
    """Model name clients use in the OpenAI API; defaults to model."""
    replicas: int = Field(default=1, ge=0, le=1000)
    """Number of vLLM pods."""
    engine: EngineSpec = EngineSpec()
    """vLLM server settings."""
    speculation: SpeculationSpec
    """Speculative decoding settings."""
    policy: PolicySpec = PolicySpec()
    """Control policy for retuning speculation."""
    metrics: MetricsSpec = MetricsSpec()
    """Metrics source of the sidecar."""


class Condition(CrdModel):
    """A status condition, as in Kubernetes' metav1.Condition."""

    type: ConditionType
    """Condition type."""
    status: Literal["True", "False", "Unknown"]
    """Condition status."""
    reason: Annotated[
        str,
        StringConstraints(
            min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
        ),
    ]
    """CamelCase reason for the last transition."""
    message: Annotated[str, StringConstraints(max_length=32768)] = ""
    """Human-readable detail."""
    last_transition_time: Timestamp
    """When the status last changed."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation the condition was computed from."""


class SpeculativeConfigStatus(CrdModel):
    """A speculative configuration of the pods, structured and as vLLM's JSON."""

    enabled: bool
    """Whether the pods run with --speculative-config."""
    method: SpeculationMethod | None = None
    """vLLM speculative method."""
    draft_model: ModelId | None = None
    """Draft model in use."""
    num_speculative_tokens: int = Field(default=0, ge=0, le=32)
    """k (the cap, with a schedule); 0 when speculation is off."""
    schedule: list[BatchSizeRange] | None = Field(default=None, max_length=64)
    """vLLM's per-batch-size schedule, when in use."""
    json_: Annotated[str, StringConstraints(max_length=8192)] | None = Field(
        default=None, alias="json"
    )
    """The --speculative-config JSON passed to vLLM."""
    source: Literal["Spec", "Controller"] = "Spec"
    """Spec: taken from spec.speculation; Controller: chosen by the control loop."""
    spec_hash: Annotated[str, StringConstraints(max_length=64)] | None = None
    """Hash of the spec.speculation it derives from; a spec edit voids a controller choice."""


class Measurements(CrdModel):
    """Windowed measurements behind the last decision."""

    time: Timestamp | None = None
    """End of the measurement window."""
    window_seconds: int | None = Field(default=None, ge=0)
    """Length of the window."""
    concurrency: float | None = Field(default=None, ge=0)
    """Mean running requests per pod."""
    acceptance_length: float | None = Field(default=None, ge=0)
    """vLLM's mean acceptance length: 1 + accepted / drafts."""
    acceptance_per_position: list[float] | None = Field(default=None, max_length=32)
    """Per draft position, the fraction of the drafts that proposed an i-th token whose i-th
    token was accepted. Measured from vLLM's counters; under a per-batch-size table, which
    drafts fewer positions at some batch sizes, the share of drafts reaching each position is
    estimated from the table, the measured load and the step-time model."""
    tpot_seconds: float | None = Field(default=None, ge=0)
    """Mean time per output token."""
    throughput_tokens_per_second: float | None = Field(default=None, ge=0)
    """Generated tokens per second per pod."""
    crossover_concurrency: float | None = Field(default=None, ge=0)
    """Estimated concurrency above which the current k stops paying off."""
    drafted_tokens_per_draft: float | None = Field(default=None, ge=0)
    """The k the engines actually ran: num_draft_tokens / num_drafts over the window."""


class CrossoverStatus(CrdModel):
    """Where k draft tokens stop paying: the smallest batch with TPOT(k) >= TPOT(0)."""

    k: int = Field(ge=1, le=32)
    """Draft tokens per step."""
    batch_size: int | None = Field(default=None, ge=1, le=65536)
    """Crossover batch size; unset when k beats no speculation at every batch size."""
    batch_size_low: int | None = Field(default=None, ge=1, le=65536)
    """10th percentile of the crossover under the step-time posterior (unset: beyond the cap)."""
    batch_size_high: int | None = Field(default=None, ge=1, le=65536)
    """90th percentile of the crossover under the step-time posterior (unset: beyond the cap)."""


class StepTimeModelStatus(CrdModel):
    """What the step-time model the decision predicted with is built from."""

    source: Literal["Prior", "Measured"]
    """Prior: the performance profile only; Measured: the profile updated by measured steps."""
    intervals: int = Field(default=0, ge=0)
    """Measured intervals behind the posterior."""
    steps: float = Field(default=0.0, ge=0)
    """Engine steps in those intervals."""
    drafting_ks: list[int] = Field(default=[], max_length=33)
    """The draft lengths the measured steps ran (0: speculation off)."""


class DecisionStatus(CrdModel):
    """The control loop's last decision and why."""

    time: Timestamp
    """When the decision was taken."""
    action: Literal["Keep", "Reconfigure", "Rollback", "Withhold", "Canary"]
    """Keep: nothing better pays for a restart; Withhold: a change is held back by a rule;
    Canary: one pod runs the chosen config beside the rest, to measure it first."""
    reason_code: Annotated[str, StringConstraints(max_length=64)] | None = None
    """Short fixed code of the reason (e.g. GainPaysRestart, MinDwell, MetricsUnavailable)."""
    reason: Annotated[str, StringConstraints(max_length=4096)]
    """Why, in words."""
    predicted_gain_percent: float | None = None
    """Predicted gain of the chosen config over the current one, in percent (posterior mean)."""
    likely_gain_percent: float | None = None
    """The gain the chosen config beats with the controller's confidence, in percent."""
    step_time_model: StepTimeModelStatus | None = None
    """Whether the step-time model is the profile's prior or measured, and from what."""
    gain_seconds: float | None = None
    """Predicted gain over the expected load regime, in seconds of full service."""
    restart_cost_seconds: float | None = Field(default=None, ge=0)
    """Seconds of service a restart is expected to cost (measured rollouts, else the estimate)."""
    crossovers: list[CrossoverStatus] = Field(default=[], max_length=32)
    """Crossover batch size of each candidate k, predicted from the measured acceptance and the
    step-time model (stepTimeModel says whether that is the profile's prior or learned)."""
    applied: bool = False
    """Whether the pods were changed (false in mode Advise)."""
    recommended: SpeculativeConfigStatus | None = None
    """The configuration decided on."""
    canary: CanaryResultStatus | None = None
    """What the canary in progress, or the one this decision settled, measured."""


class SpeculationChoice(CrdModel):
    """A speculative configuration as the controller tracks it: k and an optional table."""

    num_speculative_tokens: int = Field(ge=0, le=32)
    """k, the cap with a table; 0 is speculation off."""
    schedule: list[BatchSizeRange] | None = Field(default=None, max_length=64)
    """vLLM's per-batch-size table, when in use."""


class CanaryResultStatus(CrdModel):
    """A canary's comparison with the rest of the fleet on the same traffic (measured)."""

    speculative_config: SpeculationChoice
    """The config the canary pod runs."""
    baseline: SpeculationChoice
    """The config the rest of the fleet runs beside it."""
    windows: int = Field(ge=0)
    """Evaluation windows compared so far."""
    measured_gain_percent: float | None = None
    """The canary's speedup over the fleet, in percent: the fleet's time per output token
    over the canary's, averaged over the windows (measured)."""
    low_gain_percent: float | None = None
    """The low end of its interval at the controller's confidence (one-sided), in percent."""
    high_gain_percent: float | None = None
    """The high end of that interval, in percent."""
    predicted_gain_percent: float
    """What the step-time posterior predicted for it when it started, in percent."""
    verdict: Literal["Running", "Promoted", "RolledBack"]
    """Running: still measuring; Promoted: the fleet follows; RolledBack: the canary is
    taken back and the fleet keeps its config."""


class CanaryStatus(CrdModel):
    """A canary in progress: one pod runs ``speculativeConfig`` beside the fleet."""

    speculative_config: SpeculationChoice
    """The config the canary pod runs."""
    baseline: SpeculationChoice
    """The config the rest of the fleet runs."""
    started_at: Timestamp
    """When the canary began."""
    predicted_gain_percent: float
    """What the step-time posterior predicted for it, in percent."""
    speedups: list[float] = Field(default=[], max_length=64)
    """One entry a window: the fleet's time per output token over the canary's."""


class RolloutStatus(CrdModel):
    """A reconfiguration whose new pods are not all Ready yet."""

    target: SpeculationChoice
    """The configuration being rolled out."""
    previous: SpeculationChoice
    """The last good configuration, restored if the rollout fails."""
    started_at: Timestamp
    """When the rollout began."""


class BatchWeight(CrdModel):
    """A run of batch sizes that each carry the same share of the time."""

    min_batch_size: int = Field(ge=1, le=65536)
    """First batch size of the run."""
    max_batch_size: int = Field(ge=1, le=65536)
    """Last batch size of the run (inclusive)."""
    weight: float = Field(ge=0, le=1)
    """Share of the busy time at each batch size of the run."""


class RegimeStatus(CrdModel):
    """The current load regime: its averaged load and acceptance, and since when."""

    load: list[BatchWeight] = Field(max_length=1024)
    """Averaged distribution of running requests per engine."""
    load_samples: int = Field(default=0, ge=0)
    """Busy samples behind the load distribution."""
    acceptance_per_position: list[float] | None = Field(default=None, max_length=32)
    """Averaged per-position acceptance, when measured."""
    drafts: float = Field(default=0.0, ge=0)
    """Drafts behind the averaged acceptance."""
    started_at: Timestamp
    """When the regime began."""
    windows: int = Field(default=1, ge=1)
    """Measurement windows folded into the regime."""
    doubted_since: Timestamp | None = None
    """First window that disagreed with the regime, while unconfirmed."""
    doubts: int = Field(default=0, ge=0)
    """Disagreeing windows in a row."""
    drift: int = Field(default=0, ge=-1024, le=1024)
    """Windows in a row whose mean batch lay above the averaged load (negative: below)."""
    context_tokens: float = Field(default=0.0, ge=0)
    """Mean context per running request, averaged as the load (0: not measured)."""


class StepTimeEvidence(CrdModel):
    """Sufficient statistics of the measured step times (the posterior is rebuilt from them)."""

    terms: list[Annotated[str, StringConstraints(max_length=32)]] = Field(default=[], max_length=16)
    """The step-time terms, in the order of the rows (evidence of other terms is dropped)."""
    gram: list[float] = Field(max_length=256)
    """The weighted sum of feature outer products, row by row."""
    moment: list[float] = Field(max_length=16)
    """The weighted sum of features times step time."""
    intervals: int = Field(ge=0)
    """Measured intervals counted."""
    steps: float = Field(ge=0)
    """Engine steps in them."""
    until: Timestamp
    """End of the newest interval counted."""
    drafting_ks: list[int] = Field(default=[], max_length=33)
    """Draft lengths seen in the counted intervals (0: speculation off)."""


class ControllerStatus(CrdModel):
    """What the control loop remembers between decisions, so a restarted operator resumes."""

    config: SpeculationChoice
    """The configuration the controller holds the pods to."""
    last_good: SpeculationChoice
    """The last configuration whose pods all became Ready."""
    rollout: RolloutStatus | None = None
    """The rollout in progress, if any."""
    canary: CanaryStatus | None = None
    """The canary in progress, if any (rendered as the Deployment NAME-canary)."""
    refuted_canary: CanaryStatus | None = None
    """The last canary taken back: not tried beside the same config again until the load
    regime changes."""
    changes: list[Timestamp] = Field(default=[], max_length=64)
    """Times of the reconfigurations of the past hour."""
    last_change_at: Timestamp | None = None
    """Time of the last reconfiguration or rollback."""
    rollout_durations_seconds: list[float] = Field(default=[], max_length=8)
    """Measured durations of the latest completed rollouts (the restart cost)."""
    cooldown_until: Timestamp | None = None
    """No reconfiguration before this time (after a rollback)."""
    regime: RegimeStatus | None = None
    """The current load regime."""
    acceptance_per_position: list[float] | None = Field(default=None, max_length=32)
    """Latest trusted per-position acceptance (kept while speculation is off)."""
    acceptance_drafts: float = Field(default=0.0, ge=0)
    """Drafts behind that acceptance."""
    step_time_evidence: StepTimeEvidence | None = None
    """The measured steps the step-time posterior has learned from."""
    regime_lengths_seconds: list[float] = Field(default=[], max_length=16)
    """How long the latest past load regimes lasted (the expected regime length)."""
    past_regime_loads: list[Annotated[list[BatchWeight], Field(max_length=1024)]] = Field(
        default=[], max_length=4
    )
    """The loads of the latest past regimes (the last of regimeLengthsSeconds), for the
    recent mixture of loads one config may serve better than a restart per regime."""
    past_regime_context_tokens: list[Annotated[float, Field(ge=0)]] = Field(
        default=[], max_length=4
    )
    """The mean context per running request of each of pastRegimeLoads (0: not
    measured): a past load is priced again at the context its requests held."""


class SpeculativeServiceStatus(CrdModel):
    """Observed state of a SpeculativeService."""

    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation last reconciled."""
    replicas: int | None = Field(default=None, ge=0)
    """Pods of the Deployment."""
    ready_replicas: int | None = Field(default=None, ge=0)
    """Pods ready to serve."""
    selector: Annotated[str, StringConstraints(max_length=4096)] | None = None
    """Label selector of the pods (for the scale subresource)."""
    conditions: list[Condition] = Field(
        default=[],
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Ready, Progressing, Degraded, MetricsAvailable and SpeculationActive."""
    speculative_config: SpeculativeConfigStatus | None = None
    """The speculative config the pods run with."""
    last_measurements: Measurements | None = None
    """Latest measurements of the control loop."""
    last_decision: DecisionStatus | None = None
    """Latest decision of the control loop."""
    controller: ControllerStatus | None = None
    """The control loop's memory (rollout, recent changes, load regime)."""


class ObjectMeta(BaseModel):
    """The parts of metadata specops reads; the rest is ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: Name  # its form is the root's NAME_RULE, which says what to fix
    namespace: DnsName = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


_DNS_LABEL = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
# The root's one rule (CEL sees metadata.name there): the name becomes a Service's name and
# a label value on every child and pod, so it must be a DNS-1035 label.
NAME_RULE = Rule(
    cel=f"self.metadata.name.size() <= 63 && self.metadata.name.matches('{_DNS_LABEL}')",
    message=(
        "metadata.name must be at most 63 lowercase letters, digits and '-', starting with a "
        "letter and ending with a letter or digit (no dots): the operator names the Service "
        "after it and labels every pod with it"
    ),
    holds=lambda service: (
        len(service.metadata.name) <= 63
        and re.fullmatch(_DNS_LABEL, service.metadata.name) is not None
    ),
)


class SpeculativeService(BaseModel):
    """A whole SpeculativeService object, as read from a manifest or the API server."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _check_name(self) -> SpeculativeService:
        if not NAME_RULE.holds(self):
            raise ValueError(NAME_RULE.message)
        return self

    api_version: Literal["specops.io/v1alpha1"] = Field(
        default="specops.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["SpeculativeService"] = "SpeculativeService"
    metadata: ObjectMeta
    spec: SpeculativeServiceSpec
    status: SpeculativeServiceStatus | None = None
