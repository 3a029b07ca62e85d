"""The control loop's memory on the object: ControllerState to status.controller and back.

Progress lives on the SpeculativeService, not in the operator's memory, so a restarted or
failed-over operator resumes a rollout, keeps counting reconfigurations per hour and
knows the load regime. Pure: models in, models out; times are RFC 3339 on the object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from specops.api import (
    BatchWeight,
    CanaryStatus,
    ControllerStatus,
    RegimeStatus,
    RolloutStatus,
    StepTimeEvidence,
)
from specops.control import Canary, ControllerState, PastRegime, Regime, Rollout
from specops.errors import SpecValidationError
from specops.policy import TERMS, AcceptanceCurve, BatchDistribution, CostEvidence, SpecConfig
from specops.render import spec_config, speculation_choice

__all__ = [
    "restore_state",
    "save_state",
    "timestamp",
    "unix_time",
]


def timestamp(seconds: float) -> str:
    """Unix seconds as the RFC 3339 time the API stores."""
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def unix_time(text: str) -> float:
    """An RFC 3339 time from the API as Unix seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _load_runs(load: BatchDistribution) -> list[BatchWeight]:
    """Consecutive batch sizes of equal weight as one run: the status stays small."""
    runs: list[BatchWeight] = []
    for batch, weight in load.weights:
        last = runs[-1] if runs else None
        if last is not None and last.max_batch_size == batch - 1 and last.weight == weight:
            runs[-1] = last.model_copy(update={"max_batch_size": batch})
        else:
            runs.append(BatchWeight(min_batch_size=batch, max_batch_size=batch, weight=weight))
    return runs


def _load(runs: list[BatchWeight], samples: int) -> BatchDistribution:
    weights = {
        batch: run.weight
        for run in runs
        for batch in range(run.min_batch_size, run.max_batch_size + 1)
    }
    return BatchDistribution.from_weights(weights, samples=samples)


def _curve(rates: list[float] | None) -> AcceptanceCurve | None:
    return AcceptanceCurve(tuple(rates)) if rates else None


def _rates(curve: AcceptanceCurve | None) -> list[float] | None:
    return list(curve.rates) if curve is not None else None


def _optional_time(seconds: float | None) -> str | None:
    return timestamp(seconds) if seconds is not None else None


def _optional_unix(text: str | None) -> float | None:
    return unix_time(text) if text is not None else None


def _evidence_status(evidence: CostEvidence) -> StepTimeEvidence | None:
    if evidence.points == 0:
        return None
    return StepTimeEvidence(
        terms=list(TERMS),
        gram=list(evidence.gram),
        moment=list(evidence.moment),
        intervals=evidence.points,
        steps=evidence.steps,
        until=timestamp(evidence.until),
        drafting_ks=list(evidence.ks),
    )


def _evidence(saved: StepTimeEvidence | None) -> CostEvidence:
    """The saved evidence; none when it was gathered for other step-time terms (an older
    operator's model) or does not have their shape, since its rows would be read as the
    wrong terms."""
    dim = len(TERMS)
    if (
        saved is None
        or saved.terms != list(TERMS)
        or len(saved.gram) != dim * dim
        or len(saved.moment) != dim
    ):
        return CostEvidence()
    return CostEvidence(
        gram=tuple(saved.gram),
        moment=tuple(saved.moment),
        points=saved.intervals,
        steps=saved.steps,
        until=unix_time(saved.until),
        ks=tuple(saved.drafting_ks),
    )


def _canary_status(canary: Canary | None) -> CanaryStatus | None:
    if canary is None:
        return None
    return CanaryStatus(
        speculative_config=speculation_choice(canary.config),
        baseline=speculation_choice(canary.baseline),
        started_at=timestamp(canary.started_at),
        predicted_gain_percent=round(canary.predicted_gain * 100, 3),
        speedups=list(canary.speedups),
    )


def _canary(saved: CanaryStatus | None) -> Canary | None:
    if saved is None:
        return None
    return Canary(
        config=spec_config(saved.speculative_config),
        baseline=spec_config(saved.baseline),
        started_at=unix_time(saved.started_at),
        predicted_gain=saved.predicted_gain_percent / 100.0,
        speedups=tuple(saved.speedups),
    )


def save_state(state: ControllerState) -> ControllerStatus:
    """status.controller for ``state``."""
    regime = state.regime
    return ControllerStatus(
        config=speculation_choice(state.config),
        last_good=speculation_choice(state.last_good),
        rollout=RolloutStatus(
            target=speculation_choice(state.rollout.target),
            previous=speculation_choice(state.rollout.previous),
            started_at=timestamp(state.rollout.started_at),
        )
        if state.rollout is not None
        else None,
        canary=_canary_status(state.canary),
        refuted_canary=_canary_status(state.refuted),
        changes=[timestamp(t) for t in state.changes],
        last_change_at=_optional_time(state.last_change_at),
        rollout_durations_seconds=list(state.rollout_durations),
        cooldown_until=_optional_time(state.cooldown_until),
        regime=RegimeStatus(
            load=_load_runs(regime.load),
            load_samples=regime.load.samples,
            acceptance_per_position=_rates(regime.acceptance),
            drafts=regime.drafts,
            started_at=timestamp(regime.started_at),
            windows=regime.windows,
            doubted_since=_optional_time(regime.doubted_since),
            doubts=regime.doubts,
            drift=regime.drift,
            context_tokens=regime.context_tokens,
        )
        if regime is not None
        else None,
        acceptance_per_position=_rates(state.acceptance),
        acceptance_drafts=state.acceptance_drafts,
        step_time_evidence=_evidence_status(state.cost_evidence),
        regime_lengths_seconds=list(state.regime_lengths),
        past_regime_loads=[_load_runs(past.load) for past in state.past_regimes],
        past_regime_context_tokens=[past.context_tokens for past in state.past_regimes],
    )


def restore_state(
    saved: ControllerStatus | None,
    in_force: SpecConfig,
    allowed: Callable[[SpecConfig], bool],
) -> ControllerState:
    """The state saved in status, held to the config the pods are rendered with.

    When the saved config is not the one in force (the spec was edited, the mode
    changed, or nothing was saved yet), the controller starts over from the config in
    force and keeps only what it measured: acceptance, regime, step times, rollout history.
    Status is anyone's to edit: a saved state that does not parse starts over, and configs
    the spec does not allow (``allowed``) are never rolled back or forward to.
    """
    if saved is None:
        return ControllerState.initial(in_force)
    try:
        state = _restored(saved)
    except (SpecValidationError, ValueError):
        return ControllerState.initial(in_force)
    configs = [state.config, state.last_good]
    if state.rollout is not None:
        configs += [state.rollout.target, state.rollout.previous]
    if state.canary is not None:
        configs += [state.canary.config]
    if state.config == in_force and all(allowed(c) for c in configs):
        return state
    return replace(state, config=in_force, last_good=in_force, rollout=None, canary=None)


def _restored(saved: ControllerStatus) -> ControllerState:
    regime = saved.regime
    return ControllerState(
        config=spec_config(saved.config),
        last_good=spec_config(saved.last_good),
        rollout=Rollout(
            target=spec_config(saved.rollout.target),
            previous=spec_config(saved.rollout.previous),
            started_at=unix_time(saved.rollout.started_at),
        )
        if saved.rollout is not None
        else None,
        canary=_canary(saved.canary),
        refuted=_canary(saved.refuted_canary),
        changes=tuple(unix_time(t) for t in saved.changes),
        last_change_at=_optional_unix(saved.last_change_at),
        rollout_durations=tuple(saved.rollout_durations_seconds),
        cooldown_until=_optional_unix(saved.cooldown_until),
        regime=Regime(
            load=_load(regime.load, regime.load_samples),
            acceptance=_curve(regime.acceptance_per_position),
            started_at=unix_time(regime.started_at),
            drafts=regime.drafts,
            windows=regime.windows,
            doubted_since=_optional_unix(regime.doubted_since),
            doubts=regime.doubts,
            drift=regime.drift,
            context_tokens=regime.context_tokens,
        )
        if regime is not None
        else None,
        acceptance=_curve(saved.acceptance_per_position),
        acceptance_drafts=saved.acceptance_drafts,
        cost_evidence=_evidence(saved.step_time_evidence),
        regime_lengths=tuple(saved.regime_lengths_seconds),
        past_regimes=_past_regimes(saved),
    )


def _past_regimes(saved: ControllerStatus) -> tuple[PastRegime, ...]:
    """The past regimes saved; loads without lengths to match (edited, or an older
    operator's) are not used, and contexts that do not match the loads are unmeasured."""
    loads = saved.past_regime_loads
    if len(loads) > len(saved.regime_lengths_seconds):
        return ()
    contexts = saved.past_regime_context_tokens
    if len(contexts) != len(loads):
        contexts = [0.0] * len(loads)
    return tuple(
        PastRegime(_load(runs, 0), context) for runs, context in zip(loads, contexts, strict=True)
    )
