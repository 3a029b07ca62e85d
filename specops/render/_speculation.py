"""The speculation the pods run with: from the spec at first, later as the controller chose it.

A :class:`SpeculationInForce` is an explicit render input, so the renderer never decides
policy. :func:`speculation_in_force` picks the controller's choice stored in
``status.speculativeConfig`` when it is still valid for the spec, and the spec's own
starting point otherwise.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

from specops.api import BatchSizeRange, SpeculativeConfigStatus, SpeculativeServiceSpec
from specops.errors import SpecValidationError
from specops.vllm import BatchSizeSchedule, SpeculativeConfig, flag_value

__all__ = [
    "SpeculationInForce",
    "controller_choice_applies",
    "data_parallel_size",
    "speculation_from_spec",
    "speculation_in_force",
    "speculation_spec_hash",
    "speculative_config_status",
    "vllm_speculative_config",
]


@dataclass(frozen=True)
class SpeculationInForce:
    """Off, or k draft tokens per step (vLLM's num_speculative_tokens), optionally narrowed
    per running batch size by a schedule of (first, last, k) ranges; plus the draft model."""

    enabled: bool
    num_speculative_tokens: int = 0
    schedule: BatchSizeSchedule | None = None
    draft_model: str | None = None

    def __post_init__(self) -> None:
        if not self.enabled and (self.num_speculative_tokens or self.schedule):
            raise SpecValidationError("speculation that is off has no k and no schedule")
        if self.enabled and self.num_speculative_tokens < 1:
            raise SpecValidationError("speculation that is on needs num_speculative_tokens >= 1")
        if self.schedule and max(k for _, _, k in self.schedule) > self.num_speculative_tokens:
            raise SpecValidationError("a schedule's k may not exceed num_speculative_tokens")

    @classmethod
    def off(cls) -> SpeculationInForce:
        """No --speculative-config: the draft model is not even loaded."""
        return cls(enabled=False)


def speculation_spec_hash(spec: SpeculativeServiceSpec) -> str:
    """Hash of spec.speculation; a controller choice is valid only under the same hash."""
    canonical = json.dumps(spec.speculation.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


_DATA_PARALLEL_FLAGS = ("--data-parallel-size", "-dp")


def data_parallel_size(spec: SpeculativeServiceSpec) -> int:
    """The data parallelism ``spec.engine.extraArgs`` gives vLLM (1 when none): vLLM ignores a
    per-batch-size table beyond 1, so the controller must choose one k there."""
    size = flag_value(spec.engine.extra_args, *_DATA_PARALLEL_FLAGS)
    if size is None:
        return 1
    try:
        return max(int(size), 1)
    except ValueError as exc:
        raise SpecValidationError(
            f"spec.engine.extraArgs: {size!r} is not a data-parallel size; give an integer "
            "after --data-parallel-size"
        ) from exc


def speculation_from_spec(spec: SpeculativeServiceSpec) -> SpeculationInForce:
    """The starting point: Off, or k = initial, with the initial schedule when enabled.

    Beyond data-parallel 1 vLLM ignores the table and drafts its largest k at every batch
    size, so the table is not rendered there and k is that largest k, as vLLM would run it.
    """
    speculation = spec.speculation
    if speculation.mode == "Off":
        return SpeculationInForce.off()
    k = speculation.num_speculative_tokens.initial
    schedule: BatchSizeSchedule | None = None
    if speculation.per_batch_size_schedule and speculation.initial_schedule:
        k = max(r.num_speculative_tokens for r in speculation.initial_schedule)
    if speculation.per_batch_size_schedule and data_parallel_size(spec) == 1:
        ranges = speculation.initial_schedule or [
            BatchSizeRange(
                min_batch_size=1, max_batch_size=spec.engine.max_num_seqs, num_speculative_tokens=k
            )
        ]
        schedule = tuple(
            (r.min_batch_size, r.max_batch_size, r.num_speculative_tokens)
            for r in sorted(ranges, key=lambda r: r.min_batch_size)
        )
    return SpeculationInForce(
        enabled=True,
        num_speculative_tokens=k,
        schedule=schedule,
        draft_model=speculation.draft_model,
    )


def _from_status(status: SpeculativeConfigStatus) -> SpeculationInForce:
    if not status.enabled:
        return SpeculationInForce.off()
    schedule = (
        tuple(
            (r.min_batch_size, r.max_batch_size, r.num_speculative_tokens) for r in status.schedule
        )
        if status.schedule
        else None
    )
    return SpeculationInForce(
        enabled=True,
        num_speculative_tokens=status.num_speculative_tokens,
        schedule=schedule,
        draft_model=status.draft_model,
    )


def controller_choice_applies(
    spec: SpeculativeServiceSpec, status: SpeculativeConfigStatus | None
) -> bool:
    """A controller's choice holds in mode Auto while the spec it was made for is unchanged."""
    return (
        status is not None
        and status.source == "Controller"
        and spec.speculation.mode == "Auto"
        and status.spec_hash == speculation_spec_hash(spec)
    )


def speculation_in_force(
    spec: SpeculativeServiceSpec, status: SpeculativeConfigStatus | None
) -> SpeculationInForce:
    """The controller's choice from status when it applies, else the spec's starting point."""
    if status is not None and controller_choice_applies(spec, status):
        return _from_status(status)
    return speculation_from_spec(spec)


def vllm_speculative_config(
    spec: SpeculativeServiceSpec, speculation: SpeculationInForce
) -> SpeculativeConfig | None:
    """The --speculative-config for the pods, or None when speculation is off."""
    if not speculation.enabled:
        return None
    return SpeculativeConfig(
        method=spec.speculation.method,
        model=speculation.draft_model,
        num_speculative_tokens=speculation.num_speculative_tokens,
        num_speculative_tokens_per_batch_size=speculation.schedule,
        prompt_lookup_min=spec.speculation.prompt_lookup_min,
        prompt_lookup_max=spec.speculation.prompt_lookup_max,
        draft_tensor_parallel_size=spec.speculation.draft_tensor_parallel_size,
    )


def speculative_config_status(
    spec: SpeculativeServiceSpec,
    speculation: SpeculationInForce,
    source: Literal["Spec", "Controller"],
) -> SpeculativeConfigStatus:
    """status.speculativeConfig for a speculation: structured, and the exact JSON vLLM gets."""
    config = vllm_speculative_config(spec, speculation)
    if config is None:
        return SpeculativeConfigStatus(
            enabled=False, source=source, spec_hash=speculation_spec_hash(spec)
        )
    schedule = (
        [
            BatchSizeRange(min_batch_size=start, max_batch_size=end, num_speculative_tokens=k)
            for start, end, k in speculation.schedule
        ]
        if speculation.schedule
        else None
    )
    return SpeculativeConfigStatus(
        enabled=True,
        method=spec.speculation.method,
        draft_model=speculation.draft_model,
        num_speculative_tokens=speculation.num_speculative_tokens,
        schedule=schedule,
        json_=config.to_json(),
        source=source,
        spec_hash=speculation_spec_hash(spec),
    )
