"""Advice for a vLLM deployment specops does not run: the controller's decision, not applied.

Pure: the observation of the selected pods over a window goes in (the same windows the
sidecar and the operator compute from the same counters), with the speculation in force
and the service's priors; :func:`advise` runs one decision of the slow loop in mode Advise
from a fresh state, so the figures are exactly those the operator would act on: the
acceptance corrected for a table's short drafts, the step time learned from the window
with the profile as prior, the crossovers under that posterior, the choice, and its gain
at the posterior mean and at the confidence the restart rule uses. Every gain is
predicted, from what was measured; none is a measured speedup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from specops.control import (
    ControllerState,
    ControlSettings,
    Decision,
    Mode,
    ReasonCode,
    ServiceModel,
    decide,
    service_window,
)
from specops.errors import SpecValidationError
from specops.observation import PodObservation, WindowObservation
from specops.policy import Crossover, SpecConfig
from specops.vllm import METHODS_NEEDING_DRAFT_MODEL, SpeculativeConfig, json_object

__all__ = [
    "Advice",
    "AdviceCrossover",
    "AdviceInForce",
    "AdviceInput",
    "AdviceRecommendation",
    "advise",
    "speculation_given",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AdviceInForce(_Model):
    """The speculation the engines run, as their own counters show it."""

    speculating: bool = Field(description="The engines export per-position acceptance counters.")
    num_speculative_tokens: int = Field(
        description="Draft positions the engines count (their per-position series)."
    )
    per_batch_size: list[list[int]] | None = Field(
        None, description="The per-batch-size table, as given with --speculative-config."
    )
    drafted_tokens_per_draft: float | None = Field(
        None, description="The k the engines ran on average: num_draft_tokens / num_drafts."
    )
    method: str = Field(description="The speculative method (given: vLLM exports no method).")


class AdviceCrossover(_Model):
    """The batch size from which k stops paying; None: it pays at every batch up to the limit."""

    k: int
    batch: int | None
    low: int | None = Field(None, description="10th percentile under the step-time posterior.")
    high: int | None = Field(None, description="90th percentile under the step-time posterior.")
    prior: int | None = Field(None, description="What the performance profile alone predicts.")


class AdviceRecommendation(_Model):
    """The config to run, and the policy's choice it came from.

    ``change`` is the controller's verdict: True when the choice's gain is likely (at
    ``confidence`` under the step-time posterior) and pays a restart; otherwise the config
    in force is what to run, and the choice is reported beside it with its gains.
    """

    change: bool
    num_speculative_tokens: int = Field(description="Of the config to run; 0: speculation off.")
    per_batch_size: list[list[int]] | None = None
    speculative_config: str | None = Field(
        description="The --speculative-config to run (None: drop the flag, speculation off)."
    )
    choice_num_speculative_tokens: int = Field(
        description="The policy's choice at the posterior mean."
    )
    choice_per_batch_size: list[list[int]] | None = None
    predicted_gain: float = Field(
        description="The choice's relative gain over the config in force at the posterior "
        "mean (predicted)."
    )
    likely_gain: float | None = Field(
        None, description="The gain the choice beats with the stated confidence (predicted)."
    )
    confidence: float
    verdict: str = Field(description="The controller's reason code for the decision.")


class Advice(_Model):
    """What was measured over the window, and what the controller would run."""

    target: str = Field(description="Where the counters were read.")
    window_seconds: float
    engines: int | None
    measured: bool = Field(description="Whether the window held usable measurements.")
    message: str
    in_force: AdviceInForce
    running_requests: dict[str, float] | None = Field(
        None, description="Running requests per engine over the window (mean, quantiles)."
    )
    acceptance_per_position: list[float] = Field(
        default_factory=list,
        description="Measured a_i, corrected for a table's short drafts; empty when unmeasured.",
    )
    acceptance_source: str
    drafts: float = 0.0
    expected_tokens: list[dict[str, float | bool]] = Field(
        default_factory=list, description="E(k) with its standard error, the sidecar's estimate."
    )
    context_tokens: float = Field(
        0.0, description="Mean context per running request the policy priced the steps at."
    )
    context_source: str = Field("", description="Whether the context was measured, and how.")
    step_seconds: float | None = Field(None, description="Mean measured step time.")
    step_time_source: str
    tpot_seconds: float | None = None
    output_tokens_per_second: float | None = None
    crossovers: list[AdviceCrossover] = Field(default_factory=list)
    recommendation: AdviceRecommendation | None = None
    reason: str = Field(description="Why the decision came out as it did, in words.")


@dataclass(frozen=True)
class AdviceInput:
    """What is known besides the counters: the config in force (if given), the priors.

    ``given_config`` is the user's --speculative-config as parsed JSON, kept whole so the
    recommendation changes only the keys specops chooses. ``kv_capacity_tokens`` is the
    profile's KV pool, read against for engines that do not report theirs;
    ``default_context_tokens`` the context assumed where none was measured.
    """

    target: str
    window_s: float
    method: str
    service: ServiceModel
    given_config: Mapping[str, object] | None = None
    kv_capacity_tokens: int | None = None
    default_context_tokens: float = 1024.0
    settings: ControlSettings = field(default_factory=lambda: ControlSettings(mode=Mode.ADVISE))


def speculation_given(text: str) -> tuple[dict[str, object], SpecConfig | None, str | None]:
    """A --speculative-config as the user runs it (or would, with speculation off now): the
    JSON object, its k and table (None without ``num_speculative_tokens``: the counters
    then say), and its method. Keys specops does not set are kept, unchecked."""
    raw = json_object(text)
    config = SpeculativeConfig.from_object(raw, known_only=True)
    in_force = config.in_force() if config.num_speculative_tokens is not None else None
    return raw, in_force, config.canonical_method if config.method else None


def _table(config: SpecConfig) -> list[list[int]] | None:
    return [r.as_list() for r in config.per_batch_size] or None


def _in_force(observation: PodObservation, given: SpecConfig | None) -> SpecConfig:
    """The speculation the engines run: the given one, checked against the positions they
    count, else the counted k with no table."""
    counted = observation.configured_k or 0
    if given is not None and given.num_speculative_tokens != counted:
        raise SpecValidationError(
            f"--speculative-config has num_speculative_tokens={given.num_speculative_tokens} "
            f"but the engines count {counted} draft positions: give the config they run"
        )
    return given if given is not None else SpecConfig.static(counted)


def _crossovers(decision: Decision) -> list[AdviceCrossover]:
    bands = {b.k: b for b in decision.crossover_bands}
    prior: dict[int, Crossover] = {c.k: c for c in decision.prior_crossovers}
    return [
        AdviceCrossover(
            k=c.k,
            batch=c.batch,
            low=bands[c.k].low if c.k in bands else None,
            high=bands[c.k].high if c.k in bands else None,
            prior=prior[c.k].batch if c.k in prior else None,
        )
        for c in decision.crossovers
    ]


def _speculative_config(config: SpecConfig, inputs: AdviceInput) -> str | None:
    """The user's --speculative-config with the k and table chosen; None for off."""
    if config.is_off:
        return None
    out: dict[str, object] = dict(inputs.given_config or {"method": inputs.method})
    out.pop("num_speculative_tokens_per_batch_size", None)
    out.update(config.as_vllm())
    if inputs.method in METHODS_NEEDING_DRAFT_MODEL and "model" not in out:
        out["model"] = "<your draft model>"
    return json.dumps(out, separators=(",", ":"))


def _recommendation(
    decision: Decision, in_force: SpecConfig, inputs: AdviceInput
) -> AdviceRecommendation | None:
    choice = decision.recommended
    if choice is None or decision.predicted_gain is None:
        return None
    change = decision.code is ReasonCode.ADVISE_ONLY
    run = choice if change else in_force
    return AdviceRecommendation(
        change=change,
        num_speculative_tokens=run.num_speculative_tokens,
        per_batch_size=_table(run),
        speculative_config=_speculative_config(run, inputs),
        choice_num_speculative_tokens=choice.num_speculative_tokens,
        choice_per_batch_size=_table(choice),
        predicted_gain=decision.predicted_gain,
        likely_gain=decision.likely_gain,
        confidence=inputs.settings.gain_confidence,
        verdict=decision.code.value,
    )


def _step_time_words(decision: Decision) -> str:
    evidence = decision.state.cost_evidence
    if evidence.points == 0:
        return "the performance profile's prior: no interval of the window could be measured"
    ks = ", ".join(str(k) for k in evidence.ks)
    return (
        f"measured: {evidence.points} intervals of {evidence.steps:.0f} steps at k = {ks}, "
        "with the performance profile as the prior"
    )


def _expected(window: WindowObservation | None) -> list[dict[str, float | bool]]:
    if window is None:
        return []
    return [
        {"k": e.k, "tokens": e.tokens, "stderr": e.stderr, "measured": e.measured}
        for e in window.acceptance.expected_tokens
    ]


def advise(
    observation: PodObservation,
    inputs: AdviceInput,
    now: float,
    given: SpecConfig | None = None,
    failures: Sequence[str] = (),
) -> Advice:
    """The advice for the pods ``observation`` measured over ``inputs.window_s``.

    ``given`` is the speculation the user says the engines run (its table cannot be read
    from the counters); without it, the counters' k with no table.
    """
    window = next(iter(observation.windows), None)
    in_force = _in_force(observation, given)
    measured = service_window(
        [observation],
        failures,
        window_s=inputs.window_s,
        in_force=in_force,
        now=now,
        pods_ready=True,
        kv_capacity_tokens=inputs.kv_capacity_tokens,
        default_context_tokens=inputs.default_context_tokens,
    )
    decision = decide(
        ControllerState.initial(in_force),
        measured.control_input,
        inputs.service,
        inputs.settings,
        now,
    )
    curve = decision.window_acceptance
    running = window.load.running if window is not None else None
    cost = window.cost if window is not None else None
    return Advice(
        target=inputs.target,
        window_seconds=inputs.window_s,
        engines=window.load.engines if window is not None else None,
        measured=measured.available,
        message="measured" if measured.available else measured.message,
        in_force=AdviceInForce(
            speculating=not in_force.is_off,
            num_speculative_tokens=in_force.num_speculative_tokens,
            per_batch_size=_table(in_force),
            drafted_tokens_per_draft=measured.drafted_tokens_per_draft,
            method=inputs.method,
        ),
        running_requests={
            "samples": running.samples,
            "mean": running.mean,
            "p50": running.p50,
            "p90": running.p90,
            "p99": running.p99,
            "max": running.max,
        }
        if running is not None
        else None,
        acceptance_per_position=list(curve.rates) if curve is not None else [],
        acceptance_source=(
            "measured, corrected for the drafts the table cut short"
            if curve is not None and in_force.per_batch_size
            else "measured"
            if curve is not None
            else "not measured (speculation off, or too few drafts): the method's published "
            "acceptance is the prior"
        ),
        drafts=measured.control_input.num_drafts,
        expected_tokens=_expected(window),
        context_tokens=measured.control_input.context_tokens,
        context_source=measured.context_source,
        step_seconds=cost.step_seconds if cost is not None else None,
        step_time_source=_step_time_words(decision),
        tpot_seconds=measured.tpot_s,
        output_tokens_per_second=window.outcome.output_tokens_per_second
        if window is not None
        else None,
        crossovers=_crossovers(decision),
        recommendation=_recommendation(decision, in_force, inputs),
        reason=decision.reason,
    )
