"""vLLM 0.33.0's ``--speculative-config`` JSON, for the keys specops writes and reads.

The source of truth is ``vllm/config/speculative.py`` (``SpeculativeMethod``, the
``SpeculativeConfig`` fields) and ``vllm/v1/spec_decode/dynamic/utils.py`` (the rules
for ``num_speculative_tokens_per_batch_size``) in the vllm-0.33.0 wheel. The operator
renders this model into the pod's command line; the simulated engine parses the same
JSON with it, so both stay exactly as strict as vLLM.
"""

from __future__ import annotations

import json
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specops.errors import SpecValidationError
from specops.policy import SpecConfig

__all__ = [
    "DEPRECATED_MTP_METHODS",
    "DYNAMIC_SCHEDULE_METHODS",
    "METHODS_NEEDING_DRAFT_MODEL",
    "METHODS_REFUSING_DRAFT_MODEL",
    "SEQUENTIAL_DRAFT_METHODS",
    "SPECULATION_METHODS",
    "VLLM_VERSION",
    "BatchSizeSchedule",
    "SpeculationMethod",
    "SpeculativeConfig",
    "VllmMethod",
    "table_applies",
]

VLLM_VERSION = "0.33.0"

# vLLM's MTPModelTypes other than "mtp": accepted, logged as deprecated and renamed to "mtp".
DeprecatedMtpMethod = Literal[
    "deepseek_mtp",
    "dots3_note_mtp",
    "mimo_mtp",
    "mimo_v2_mtp",
    "glm4_moe_mtp",
    "glm4_moe_lite_mtp",
    "glm_ocr_mtp",
    "ernie_mtp",
    "nemotron_h_mtp",
    "exaone_moe_mtp",
    "exaone4_5_mtp",
    "qwen3_next_mtp",
    "qwen4_exp_mtp",
    "qwen3_5_mtp",
    "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp",
    "minimax_m3_mtp",
    "bailing_hybrid_mtp",
    "kimi_k3_mtp",
    "pangu_ultra_moe_mtp",
    "step3p5_mtp",
    "step5_mtp",
    "hy_v3_mtp",
    "hy_v4_mtp",
    "gemma4_mtp",
    "inkling_mtp",
    "glm5_next_mtp",
]

# The methods a SpeculativeService may ask for: vLLM's canonical names that speculate.
# Left out: "extract_hidden_states" (drafts nothing) and "custom_class" (code outside the image).
SpeculationMethod = Literal[
    "eagle3",
    "eagle",
    "draft_model",
    "mtp",
    "ngram",
    "ngram_gpu",
    "suffix",
    "dflash",
    "dspark",
]

# Every value vLLM 0.33.0 accepts for ``method`` (its SpeculativeMethod literal).
VllmMethod = Literal[
    SpeculationMethod,
    "custom_class",
    "extract_hidden_states",
    DeprecatedMtpMethod,
]

SPECULATION_METHODS: tuple[str, ...] = get_args(SpeculationMethod)
DEPRECATED_MTP_METHODS: frozenset[str] = frozenset(get_args(DeprecatedMtpMethod))

# vLLM raises "num_speculative_tokens was provided but without speculative model" for these.
METHODS_NEEDING_DRAFT_MODEL: frozenset[str] = frozenset(
    {"eagle", "eagle3", "dflash", "draft_model"}
)
# vLLM sets ``model`` to the method's own name for these and never loads a draft.
METHODS_REFUSING_DRAFT_MODEL: frozenset[str] = frozenset({"ngram", "ngram_gpu", "suffix"})
# mtp and dspark take the target's own checkpoint when no draft model is given.

# Methods whose proposer honours the per-batch-size schedule on Model Runner V1
# (vllm/config/vllm.py, _maybe_disable_dynamic_sd_for_v1); others silently drop it.
DYNAMIC_SCHEDULE_METHODS: frozenset[str] = frozenset(
    {"ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"}
)

# Methods whose proposer runs one forward pass of the draft per proposed position
# (vllm/v1/spec_decode/eagle.py loops over num_speculative_tokens; mtp and draft_model use
# the same loop), so drafting costs grow with k. dflash proposes its whole block in one
# pass, and the lookup methods (ngram, ngram_gpu, suffix) look up once.
SEQUENTIAL_DRAFT_METHODS: frozenset[str] = frozenset({"eagle", "eagle3", "mtp", "draft_model"})

# What a per-batch-size table costs besides its k (vLLM #49548, vllm-ascend #16638): the
# forward runs PIECEWISE CUDA graphs, measured at 14 % of a single-stream step, and a k = 0
# row still runs one draft pass (and keeps the lookahead slots), so it is not speculation
# off. The controller starts from these and measures the rest.
TABLE_STEP_PENALTY_FRACTION = 0.14
TABLE_ZERO_ROW_DRAFT_POSITIONS = 1

BatchSizeSchedule = tuple[tuple[int, int, int], ...]


def table_applies(method: str, data_parallel: int = 1) -> bool:
    """Whether vLLM honours a per-batch-size table for this method and parallelism.

    Beyond data-parallel 1 vLLM drops the table and drafts num_speculative_tokens.
    """
    return method in DYNAMIC_SCHEDULE_METHODS and data_parallel == 1


def _check_schedule(schedule: BatchSizeSchedule) -> BatchSizeSchedule:
    """vLLM's validate_and_normalize_dynamic_sd_schedule: sorted, disjoint, from batch size 1."""
    if not schedule:
        raise ValueError("num_speculative_tokens_per_batch_size must not be empty.")
    for start, end, k in schedule:
        if start <= 0 or end <= 0:
            raise ValueError(f"Batch-size range ({start}, {end}) must be positive.")
        if start > end:
            raise ValueError(f"Batch-size range start must be <= end for ({start}, {end}, {k}).")
        if k < 0:
            raise ValueError("num_speculative_tokens_per_batch_size values must be >= 0.")
    ordered = tuple(sorted(schedule, key=lambda entry: entry[0]))
    previous_end = 0
    for start, end, _ in ordered:
        if start <= previous_end:
            raise ValueError("Batch-size ranges must be non-overlapping and sorted.")
        previous_end = end
    if ordered[0][0] != 1:
        raise ValueError(
            "The first batch-size range must start at 1 so every runtime batch size "
            "has a defined schedule."
        )
    return ordered


class SpeculativeConfig(BaseModel):
    """The subset of vLLM's SpeculativeConfig that specops sets, with vLLM's own checks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: VllmMethod | None = None
    model: str | None = None
    num_speculative_tokens: int | None = Field(default=None, gt=0)
    num_speculative_tokens_per_batch_size: BatchSizeSchedule | None = None
    prompt_lookup_min: int | None = Field(default=None, ge=1)
    prompt_lookup_max: int | None = Field(default=None, ge=1)
    draft_tensor_parallel_size: int | None = Field(default=None, ge=1)

    @field_validator("num_speculative_tokens_per_batch_size")
    @classmethod
    def _schedule(cls, value: BatchSizeSchedule | None) -> BatchSizeSchedule | None:
        return None if value is None else _check_schedule(value)

    @model_validator(mode="after")
    def _cross_fields(self) -> SpeculativeConfig:
        if (
            self.prompt_lookup_min is not None
            and self.prompt_lookup_max is not None
            and self.prompt_lookup_min > self.prompt_lookup_max
        ):
            raise ValueError(
                f"prompt_lookup_min={self.prompt_lookup_min} must be <= "
                f"prompt_lookup_max={self.prompt_lookup_max}"
            )
        if (
            self.model is None
            and self.num_speculative_tokens is not None
            and self.method in METHODS_NEEDING_DRAFT_MODEL
        ):
            raise ValueError("num_speculative_tokens was provided but without speculative model.")
        return self

    @property
    def canonical_method(self) -> str:
        """The method vLLM runs: deprecated MTP names become "mtp"; unset means draft_model."""
        if self.method is None:
            return "ngram" if self.model in ("ngram", "[ngram]") else "draft_model"
        return "mtp" if self.method in DEPRECATED_MTP_METHODS else self.method

    def in_force(self) -> SpecConfig:
        """The k and table this config runs (``num_speculative_tokens`` must be set)."""
        k = self.num_speculative_tokens
        if k is None:
            raise SpecValidationError(
                "--speculative-config: num_speculative_tokens must be given to know the k in force"
            )
        table = self.num_speculative_tokens_per_batch_size
        return SpecConfig.table(table, cap=k) if table else SpecConfig.static(k)

    def to_json(self) -> str:
        """Compact JSON for ``--speculative-config``, unset keys left out."""
        data = self.model_dump(mode="json", exclude_none=True)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SpeculativeConfig:
        """Parse ``--speculative-config`` JSON; vLLM's hyphenated keys are accepted too."""
        return cls.from_object(json_object(text))

    @classmethod
    def from_object(cls, raw: dict[str, object], *, known_only: bool = False) -> SpeculativeConfig:
        """A parsed ``--speculative-config``; ``known_only`` ignores the keys specops does not
        set (vLLM has many more), which are otherwise refused."""
        keys = {key.replace("-", "_"): value for key, value in raw.items()}
        if known_only:
            keys = {key: value for key, value in keys.items() if key in cls.model_fields}
        try:
            return cls.model_validate(keys)
        except ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
                for err in exc.errors()
            )
            raise SpecValidationError(f"invalid --speculative-config: {details}") from exc


def json_object(text: str) -> dict[str, object]:
    """``--speculative-config`` text as a JSON object, or an error saying what is wrong."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecValidationError(f"--speculative-config is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise SpecValidationError("--speculative-config must be a JSON object")
    return raw
