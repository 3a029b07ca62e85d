"""The speculation the pods run with: from the spec at first, later as the controller chose it.

In memory a speculation is a :class:`~specops.policy.SpecConfig` (k and the optional
per-batch-size table; k = 0 is off); the draft model, the method and the other keys of
vLLM's ``--speculative-config`` come from the spec. It is an explicit render input, so the
renderer never decides policy. :func:`speculation_in_force` picks the controller's choice
stored in ``status.speculativeConfig`` when it is still valid for the spec and within its
bounds (:func:`controller_choice` says why not), and the spec's own starting point otherwise.

The API keeps a speculation in two forms: ``SpeculationChoice`` (k and the table, in the
controller's saved state) and ``SpeculativeConfigStatus`` (the same plus what the spec adds
to it: method, draft model, vLLM's JSON, the spec hash). :func:`speculation_choice` and
:func:`speculative_config_status` write them, :func:`spec_config` reads either back: the
one way between the in-memory value and the API.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from specops.api import (
    BatchSizeRange,
    SpeculationChoice,
    SpeculativeConfigStatus,
    SpeculativeServiceSpec,
    SpeculativeServiceStatus,
)
from specops.errors import SpecValidationError
from specops.policy import ScheduleRange, SpecConfig
from specops.vllm import SpeculativeConfig, flag_value

__all__ = [
    "canary_in_force",
    "config_allowed",
    "controller_choice",
    "data_parallel_size",
    "spec_config",
    "speculation_choice",
    "speculation_from_spec",
    "speculation_in_force",
    "speculation_spec_hash",
    "speculative_config_status",
    "vllm_speculative_config",
]


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


def _checked(config: SpecConfig) -> SpecConfig:
    """What the pods may be rendered with: no range of the table drafts past the cap."""
    if any(r.k > config.num_speculative_tokens for r in config.per_batch_size):
        raise SpecValidationError("a schedule's k may not exceed num_speculative_tokens")
    return config


def _config(k: int, ranges: list[BatchSizeRange] | None) -> SpecConfig:
    """k and the API's table as one value, sorted by batch size."""
    table = tuple(
        ScheduleRange(r.min_batch_size, r.max_batch_size, r.num_speculative_tokens)
        for r in sorted(ranges or [], key=lambda r: r.min_batch_size)
    )
    try:
        return _checked(SpecConfig(k, table))
    except ValueError as exc:
        raise SpecValidationError(f"invalid speculation: {exc}") from exc


def speculation_from_spec(spec: SpeculativeServiceSpec) -> SpecConfig:
    """The starting point: Off, or k = initial, or the initial schedule when one is given.

    Without an initial schedule the start is one k, not a one-range table: vLLM runs the
    same k either way, but a table costs it PIECEWISE CUDA graphs at every step (vLLM
    #49548). Beyond data-parallel 1 vLLM ignores the table and drafts its largest k at
    every batch size, so the table is not rendered there and k is that largest k, as vLLM
    would run it.
    """
    speculation = spec.speculation
    if speculation.mode == "Off":
        return SpecConfig.off()
    schedule = speculation.initial_schedule if speculation.per_batch_size_schedule else None
    if not schedule:
        return _config(speculation.num_speculative_tokens.initial, None)
    k = max(r.num_speculative_tokens for r in schedule)
    return _config(k, schedule if data_parallel_size(spec) == 1 else None)


def speculation_choice(config: SpecConfig) -> SpeculationChoice:
    """The API's form of a speculation: k and the table (None when there is none)."""
    table = [
        BatchSizeRange(min_batch_size=r.start, max_batch_size=r.end, num_speculative_tokens=r.k)
        for r in config.per_batch_size
    ]
    return SpeculationChoice(
        num_speculative_tokens=config.num_speculative_tokens, schedule=table or None
    )


def spec_config(recorded: SpeculationChoice | SpeculativeConfigStatus) -> SpecConfig:
    """The speculation the API recorded; a status that is not enabled is off."""
    if isinstance(recorded, SpeculativeConfigStatus):
        if not recorded.enabled:
            return SpecConfig.off()
        if recorded.num_speculative_tokens < 1:
            raise SpecValidationError("speculation that is on needs num_speculative_tokens >= 1")
    return _config(recorded.num_speculative_tokens, recorded.schedule)


def _controller_choice_applies(
    spec: SpeculativeServiceSpec, status: SpeculativeConfigStatus | None
) -> bool:
    """A controller's choice holds in mode Auto while the spec it was made for is unchanged."""
    return (
        status is not None
        and status.source == "Controller"
        and spec.speculation.mode == "Auto"
        and status.spec_hash == speculation_spec_hash(spec)
    )


def _outside_spec(spec: SpeculativeServiceSpec, config: SpecConfig) -> str | None:
    """Why the spec does not allow ``config``, or None when it does."""
    if config.is_off:
        return None
    tokens = spec.speculation.num_speculative_tokens
    k = config.num_speculative_tokens
    if not tokens.min <= k <= tokens.max:
        return (
            f"k={k} is outside spec.speculation.numSpeculativeTokens "
            f"(min {tokens.min}, max {tokens.max})"
        )
    if config.per_batch_size and (
        not spec.speculation.per_batch_size_schedule or data_parallel_size(spec) != 1
    ):
        return "it has a per-batch-size table, which the spec does not allow"
    return None


def controller_choice(
    spec: SpeculativeServiceSpec, status: SpeculativeConfigStatus | None
) -> tuple[SpecConfig | None, str | None]:
    """The controller's choice recorded in status, when it applies and the spec allows it.

    Status can be written by anyone allowed to patch it, so the choice is checked against
    the spec's bounds on every read. The second value says why a recorded choice that
    claims to apply was refused (None when there is none, or it holds).
    """
    if status is None or not _controller_choice_applies(spec, status):
        return None, None
    try:
        config = spec_config(status)
    except SpecValidationError as exc:
        problem: str | None = str(exc)
    else:
        problem = _outside_spec(spec, config)
        if problem is None:
            return config, None
    return None, (
        f"status.speculativeConfig was not written by this operator for this spec ({problem}); "
        "the pods run the spec's starting point instead"
    )


def speculation_in_force(
    spec: SpeculativeServiceSpec, status: SpeculativeConfigStatus | None
) -> SpecConfig:
    """The controller's choice from status when it applies, else the spec's starting point."""
    chosen, _ = controller_choice(spec, status)
    return chosen if chosen is not None else speculation_from_spec(spec)


def canary_in_force(
    spec: SpeculativeServiceSpec, status: SpeculativeServiceStatus | None
) -> SpecConfig | None:
    """The config of the canary the controller recorded, when one runs: in mode Auto, with
    two or more replicas, beside the speculation in force, and allowed by the spec (status
    is anyone's to edit, so it is checked on every read)."""
    saved = status.controller.canary if status is not None and status.controller else None
    if saved is None or spec.speculation.mode != "Auto" or spec.replicas < 2:
        return None
    try:
        config, baseline = spec_config(saved.speculative_config), spec_config(saved.baseline)
    except SpecValidationError:
        return None
    in_force = speculation_in_force(spec, status.speculative_config if status else None)
    if baseline != in_force or config == in_force or _outside_spec(spec, config) is not None:
        return None
    return config


def config_allowed(spec: SpeculativeServiceSpec, config: SpecConfig) -> bool:
    """Whether the spec allows the pods to run ``config`` (saved state is checked with it)."""
    return _outside_spec(spec, config) is None


def vllm_speculative_config(
    spec: SpeculativeServiceSpec, config: SpecConfig
) -> SpeculativeConfig | None:
    """The --speculative-config for the pods, or None when speculation is off."""
    if config.is_off:
        return None
    speculation = spec.speculation
    return SpeculativeConfig.model_validate(
        {
            "method": speculation.method,
            "model": speculation.draft_model,
            **_checked(config).as_vllm(),
            "prompt_lookup_min": speculation.prompt_lookup_min,
            "prompt_lookup_max": speculation.prompt_lookup_max,
            "draft_tensor_parallel_size": speculation.draft_tensor_parallel_size,
        }
    )


def speculative_config_status(
    spec: SpeculativeServiceSpec,
    config: SpecConfig,
    source: Literal["Spec", "Controller"],
) -> SpeculativeConfigStatus:
    """status.speculativeConfig for a speculation: structured, and the exact JSON vLLM gets."""
    vllm = vllm_speculative_config(spec, config)
    if vllm is None:
        return SpeculativeConfigStatus(
            enabled=False, source=source, spec_hash=speculation_spec_hash(spec)
        )
    choice = speculation_choice(config)
    return SpeculativeConfigStatus(
        enabled=True,
        method=spec.speculation.method,
        draft_model=spec.speculation.draft_model,
        num_speculative_tokens=choice.num_speculative_tokens,
        schedule=choice.schedule,
        json_=vllm.to_json(),
        source=source,
        spec_hash=speculation_spec_hash(spec),
    )
