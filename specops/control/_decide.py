"""The slow loop's decision: keep, reconfigure, roll back, or withhold, and why.

Changing the speculative config restarts pods, so a better config is worth it only when
its predicted gain, over the time the current load regime is expected to last, beats the
restart's lost service by a margin. Around that sit the safety rules: a minimum dwell
between changes, a cap per hour, no action on stale or thin measurements, a rollback
when new pods do not become Ready in time and a cooldown after it, and the modes
(Auto applies, Advise only recommends, Fixed and Off never change anything).

Everything here is pure: state, measurements, settings and ``now`` go in, a frozen
``Decision`` carrying the next state comes out. The caller stores the state, applies the
config, and reports the decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from specops.control._regime import Regime, RegimeSettings, track_regime
from specops.policy import (
    AcceptanceCurve,
    BatchDistribution,
    Crossover,
    Objective,
    PolicyChoice,
    PolicyInput,
    SpecConfig,
    StepCostModel,
    acceptance_from_counters,
    choose,
    draft_reach,
)

__all__ = [
    "Action",
    "ControlSettings",
    "ControllerState",
    "Decision",
    "Mode",
    "Observation",
    "ReasonCode",
    "Rollout",
    "ServiceModel",
    "decide",
]

_HOUR = 3600.0
_DURATIONS_KEPT = 5


class Mode(StrEnum):
    AUTO = "Auto"
    ADVISE = "Advise"
    FIXED = "Fixed"
    OFF = "Off"


class Action(StrEnum):
    """Keep: nothing better pays for a restart. Withhold: a change is held back by a rule."""

    KEEP = "Keep"
    RECONFIGURE = "Reconfigure"
    ROLLBACK = "Rollback"
    WITHHOLD = "Withhold"


class ReasonCode(StrEnum):
    """Why a decision came out as it did, as a short fixed code (metric labels, events)."""

    ROLLOUT_DONE = "RolloutDone"
    ROLLOUT_IN_PROGRESS = "RolloutInProgress"
    ROLLOUT_FAILED = "RolloutFailed"
    METRICS_UNAVAILABLE = "MetricsUnavailable"
    METRICS_STALE = "MetricsStale"
    NO_COST_MODEL = "NoCostModel"
    TOO_LITTLE_LOAD = "TooLittleLoad"
    REGIME_UNCONFIRMED = "RegimeUnconfirmed"
    ACCEPTANCE_UNKNOWN = "AcceptanceUnknown"
    MODE_FROZEN = "ModeFrozen"
    ALREADY_BEST = "AlreadyBest"
    GAIN_TOO_SMALL = "GainTooSmall"
    RESTART_NOT_WORTH = "RestartNotWorth"
    COOLDOWN = "Cooldown"
    MIN_DWELL = "MinDwell"
    HOURLY_CAP = "HourlyCap"
    ADVISE_ONLY = "AdviseOnly"
    GAIN_PAYS_RESTART = "GainPaysRestart"


@dataclass(frozen=True)
class ServiceModel:
    """What is known about the service without measuring it.

    ``per_batch_size`` False: the user wants one k, never vLLM's per-batch-size table.
    """

    method: str
    cost: StepCostModel
    data_parallel: int = 1
    max_batch: int = 256
    prior_acceptance: AcceptanceCurve | None = None
    per_batch_size: bool = True


@dataclass(frozen=True)
class ControlSettings:
    """The spec's policy knobs, in seconds and fractions.

    ``min_gain``: smallest relative gain worth a restart at all. ``margin``: the gain over
    the expected regime, in seconds of full service, must exceed ``margin`` times the
    restart's lost service (``restart_cost_s`` x ``capacity_loss``; observed rollout
    durations replace the estimate once there are some). The expected remaining length of
    a regime is its age so far, clamped to ``regime_min_s``..``regime_max_s``.
    """

    mode: Mode = Mode.AUTO
    objective: Objective = field(default_factory=Objective)
    k_min: int = 1
    k_max: int = 7
    min_gain: float = 0.05
    margin: float = 2.0
    restart_cost_s: float = 120.0
    capacity_loss: float = 1.0
    min_dwell_s: float = 900.0
    max_reconfigurations_per_hour: int = 4
    max_staleness_s: float = 120.0
    min_drafts: int = 2000
    min_load_samples: int = 10
    rollout_timeout_s: float = 900.0
    rollback_cooldown_s: float = 3600.0
    regime_min_s: float = 600.0
    regime_max_s: float = 3600.0
    regime: RegimeSettings = field(default_factory=RegimeSettings)
    confidence_z: float = 1.0
    keep_draft_gain: float = 0.01

    def __post_init__(self) -> None:
        if self.margin < 0 or self.min_gain < 0:
            raise ValueError("margin and min_gain must be >= 0")
        if not 0.0 <= self.capacity_loss <= 1.0:
            raise ValueError(f"capacity_loss must be in [0, 1], got {self.capacity_loss}")
        if self.regime_min_s > self.regime_max_s:
            raise ValueError("regime_min_s must be <= regime_max_s")


@dataclass(frozen=True)
class Observation:
    """One measurement window, from the engine's own counters.

    ``load`` is the running-request distribution over the window (None if nothing was
    sampled); ``num_drafts`` and ``accepted_per_position`` are counter increases over it;
    ``pods_ready`` says whether every pod runs the config in force and is Ready.
    ``problem`` says why there are no usable measurements at all (empty when there are).
    """

    window_end: float
    load: BatchDistribution | None
    context_tokens: float
    num_drafts: float
    accepted_per_position: tuple[float, ...]
    pods_ready: bool = True
    problem: str = ""


@dataclass(frozen=True)
class Rollout:
    target: SpecConfig
    previous: SpecConfig
    started_at: float


@dataclass(frozen=True)
class ControllerState:
    """What the loop remembers between decisions (the operator keeps it in status)."""

    config: SpecConfig
    last_good: SpecConfig
    rollout: Rollout | None = None
    changes: tuple[float, ...] = ()
    last_change_at: float | None = None
    rollout_durations: tuple[float, ...] = ()
    cooldown_until: float | None = None
    regime: Regime | None = None
    acceptance: AcceptanceCurve | None = None
    acceptance_drafts: float = 0.0

    @classmethod
    def initial(cls, config: SpecConfig) -> ControllerState:
        return cls(config=config, last_good=config)


@dataclass(frozen=True)
class Decision:
    """One decision, taken or withheld, with the state to carry to the next one.

    ``config`` is what the pods should run after it; ``recommended`` what the policy
    would choose; ``predicted_gain`` its relative gain over the config in force and
    ``gain_s`` that gain over the expected regime, in seconds of full service, to set
    against ``restart_cost_s``.
    """

    at: float
    action: Action
    code: ReasonCode
    config: SpecConfig
    recommended: SpecConfig | None
    applied: bool
    reason: str
    predicted_gain: float | None
    gain_s: float | None
    restart_cost_s: float
    crossovers: tuple[Crossover, ...]
    new_regime: bool
    state: ControllerState


def _restart_cost(state: ControllerState, settings: ControlSettings) -> float:
    seen = state.rollout_durations
    restart = sum(seen) / len(seen) if seen else settings.restart_cost_s
    return restart * settings.capacity_loss


def _follow_rollout(
    state: ControllerState,
    rollout: Rollout,
    observation: Observation,
    settings: ControlSettings,
    now: float,
) -> tuple[Action, ReasonCode, ControllerState, str]:
    elapsed = now - rollout.started_at
    if observation.pods_ready:
        durations = (*state.rollout_durations, elapsed)[-_DURATIONS_KEPT:]
        done = replace(state, rollout=None, last_good=rollout.target, rollout_durations=durations)
        return (
            Action.KEEP,
            ReasonCode.ROLLOUT_DONE,
            done,
            f"rollout to {rollout.target.describe()} Ready after {elapsed:.0f}s",
        )
    if elapsed > settings.rollout_timeout_s:
        back = replace(
            state,
            config=rollout.previous,
            rollout=None,
            last_change_at=now,
            cooldown_until=now + settings.rollback_cooldown_s,
        )
        return (
            Action.ROLLBACK,
            ReasonCode.ROLLOUT_FAILED,
            back,
            f"pods with {rollout.target.describe()} not Ready after {elapsed:.0f}s "
            f"(limit {settings.rollout_timeout_s:.0f}s): back to the last good config "
            f"{rollout.previous.describe()}, kept for {settings.rollback_cooldown_s:.0f}s",
        )
    return (
        Action.WITHHOLD,
        ReasonCode.ROLLOUT_IN_PROGRESS,
        state,
        f"rollout to {rollout.target.describe()} in progress for {elapsed:.0f}s "
        f"(limit {settings.rollout_timeout_s:.0f}s)",
    )


def _measure_acceptance(
    state: ControllerState,
    observation: Observation,
    load: BatchDistribution,
    service: ServiceModel,
    settings: ControlSettings,
) -> AcceptanceCurve | None:
    """The window's acceptance, or None when it had too few drafts to trust."""
    if observation.num_drafts < settings.min_drafts or state.config.is_off:
        return None
    reach = draft_reach(state.config, load, service.cost, observation.context_tokens)
    try:
        return acceptance_from_counters(
            observation.num_drafts, observation.accepted_per_position, reach
        )
    except ValueError:
        return None


def _acceptance_for_policy(
    state: ControllerState, regime: Regime, service: ServiceModel
) -> tuple[AcceptanceCurve, float] | None:
    if regime.acceptance is not None:
        return regime.acceptance, regime.drafts
    if state.acceptance is not None:
        return state.acceptance, state.acceptance_drafts
    if service.prior_acceptance is not None:
        return service.prior_acceptance, 0.0
    return None


def _policy(
    state: ControllerState,
    regime: Regime,
    acceptance: tuple[AcceptanceCurve, float],
    observation: Observation,
    service: ServiceModel,
    settings: ControlSettings,
) -> PolicyChoice:
    curve, drafts = acceptance
    return choose(
        PolicyInput(
            acceptance=curve,
            drafts_seen=int(drafts),
            load=regime.load,
            cost=service.cost,
            context_tokens=observation.context_tokens,
            current=state.config,
            method=service.method,
            objective=settings.objective,
            data_parallel=service.data_parallel,
            k_min=settings.k_min,
            k_max=settings.k_max,
            max_batch=service.max_batch,
            confidence_z=settings.confidence_z,
            min_gain=settings.keep_draft_gain,
            per_batch_size=service.per_batch_size,
        )
    )


def _gate(
    state: ControllerState, settings: ControlSettings, now: float
) -> tuple[ReasonCode, str] | None:
    """The rule that forbids a reconfiguration now, in words, or None."""
    if state.cooldown_until is not None and now < state.cooldown_until:
        return (
            ReasonCode.COOLDOWN,
            f"cooling down after a rollback for another {state.cooldown_until - now:.0f}s",
        )
    if state.last_change_at is not None and now - state.last_change_at < settings.min_dwell_s:
        return ReasonCode.MIN_DWELL, (
            f"minimum dwell: the last change was {now - state.last_change_at:.0f}s ago "
            f"(dwell {settings.min_dwell_s:.0f}s)"
        )
    recent = [t for t in state.changes if now - t < _HOUR]
    if len(recent) >= settings.max_reconfigurations_per_hour:
        return ReasonCode.HOURLY_CAP, (
            f"{len(recent)} reconfigurations in the past hour reach the cap of "
            f"{settings.max_reconfigurations_per_hour}"
        )
    return None


def decide(
    state: ControllerState,
    observation: Observation,
    service: ServiceModel | None,
    settings: ControlSettings,
    now: float,
) -> Decision:
    """One tick of the slow loop; ``service`` is None when no step-cost model is known."""
    restart_cost = _restart_cost(state, settings)

    def out(
        action: Action,
        code: ReasonCode,
        next_state: ControllerState,
        reason: str,
        choice: PolicyChoice | None = None,
        gain_s: float | None = None,
        new_regime: bool = False,
    ) -> Decision:
        return Decision(
            at=now,
            action=action,
            code=code,
            config=next_state.config,
            recommended=choice.config if choice else None,
            applied=action in (Action.RECONFIGURE, Action.ROLLBACK),
            reason=reason,
            predicted_gain=choice.gain_over_current if choice else None,
            gain_s=gain_s,
            restart_cost_s=restart_cost,
            crossovers=choice.crossovers if choice else (),
            new_regime=new_regime,
            state=next_state,
        )

    if state.rollout is not None:
        action, code, next_state, reason = _follow_rollout(
            state, state.rollout, observation, settings, now
        )
        return out(action, code, next_state, reason)

    if observation.problem:
        return out(
            Action.WITHHOLD,
            ReasonCode.METRICS_UNAVAILABLE,
            state,
            f"holding {state.config.describe()}: {observation.problem}",
        )
    if service is None:
        return out(
            Action.WITHHOLD,
            ReasonCode.NO_COST_MODEL,
            state,
            f"holding {state.config.describe()}: no step-cost model (performance profile) is "
            f"known for this service, so no config can be predicted",
        )

    age = now - observation.window_end
    if age > settings.max_staleness_s:
        return out(
            Action.WITHHOLD,
            ReasonCode.METRICS_STALE,
            state,
            f"holding {state.config.describe()}: the latest measurements are {age:.0f}s old "
            f"(limit {settings.max_staleness_s:.0f}s)",
        )
    load = observation.load
    if load is None or load.samples < settings.min_load_samples:
        seen = load.samples if load else 0
        return out(
            Action.WITHHOLD,
            ReasonCode.TOO_LITTLE_LOAD,
            state,
            f"holding {state.config.describe()}: the window has {seen} busy load samples, "
            f"fewer than the {settings.min_load_samples} a decision needs",
        )

    window_curve = _measure_acceptance(state, observation, load, service, settings)
    regime, new_regime = track_regime(
        state.regime,
        load,
        window_curve,
        observation.num_drafts,
        observation.window_end,
        settings.regime,
    )
    state = replace(state, regime=regime)
    if window_curve is not None:
        state = replace(state, acceptance=window_curve, acceptance_drafts=observation.num_drafts)
    if regime.doubts > 0:
        return out(
            Action.WITHHOLD,
            ReasonCode.REGIME_UNCONFIRMED,
            state,
            f"holding {state.config.describe()}: the load or acceptance moved away from the "
            f"current regime; waiting for {settings.regime.confirmations} windows in a row "
            f"to confirm a new one",
        )
    acceptance = _acceptance_for_policy(state, regime, service)
    if acceptance is None:
        return out(
            Action.WITHHOLD,
            ReasonCode.ACCEPTANCE_UNKNOWN,
            state,
            f"holding {state.config.describe()}: acceptance is unknown (fewer than "
            f"{settings.min_drafts} drafts measured and no prior)",
            new_regime=new_regime,
        )

    choice = _policy(state, regime, acceptance, observation, service, settings)
    gain = choice.gain_over_current
    horizon = min(max(regime.age(now), settings.regime_min_s), settings.regime_max_s)
    gain_s = gain * horizon
    if settings.mode in (Mode.FIXED, Mode.OFF):
        return out(
            Action.KEEP,
            ReasonCode.MODE_FROZEN,
            state,
            f"mode {settings.mode.value} never changes the config; the policy would choose "
            f"{choice.config.describe()} ({gain:+.1%}): {choice.reason}",
            choice,
            gain_s,
            new_regime,
        )
    if choice.config == state.config or gain < settings.min_gain:
        verdict = (
            "is the best config"
            if choice.config == state.config
            else f"stays: {choice.config.describe()} would gain only {gain:+.1%}, below "
            f"the {settings.min_gain:.0%} minimum"
        )
        return out(
            Action.KEEP,
            ReasonCode.ALREADY_BEST if choice.config == state.config else ReasonCode.GAIN_TOO_SMALL,
            state,
            f"{state.config.describe()} {verdict}. {choice.reason}",
            choice,
            gain_s,
            new_regime,
        )
    pays = (
        f"{gain:+.1%} over an expected {horizon:.0f}s of this regime is {gain_s:.0f}s of "
        f"service against {restart_cost:.0f}s lost to a restart (margin {settings.margin:g}x)"
    )
    if gain_s <= settings.margin * restart_cost:
        return out(
            Action.KEEP,
            ReasonCode.RESTART_NOT_WORTH,
            state,
            f"{state.config.describe()} stays: switching to {choice.config.describe()} does not "
            f"pay: {pays}",
            choice,
            gain_s,
            new_regime,
        )
    blocked = _gate(state, settings, now)
    if blocked is not None:
        code, rule = blocked
        return out(
            Action.WITHHOLD,
            code,
            state,
            f"{choice.config.describe()} would pay ({pays}) but is withheld: {rule}",
            choice,
            gain_s,
            new_regime,
        )
    if settings.mode is Mode.ADVISE:
        return out(
            Action.WITHHOLD,
            ReasonCode.ADVISE_ONLY,
            state,
            f"mode Advise: recommending {choice.config.describe()} ({pays}); not applied. "
            f"{choice.reason}",
            choice,
            gain_s,
            new_regime,
        )
    changed = replace(
        state,
        config=choice.config,
        rollout=Rollout(target=choice.config, previous=state.last_good, started_at=now),
        changes=(*[t for t in state.changes if now - t < _HOUR], now),
        last_change_at=now,
    )
    return out(
        Action.RECONFIGURE,
        ReasonCode.GAIN_PAYS_RESTART,
        changed,
        f"reconfiguring {state.config.describe()} -> {choice.config.describe()}: {pays}. "
        f"{choice.reason}",
        choice,
        gain_s,
        new_regime,
    )
