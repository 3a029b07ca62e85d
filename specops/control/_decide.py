"""The slow loop's decision: keep, reconfigure, roll back, or withhold, and why.

Changing the speculative config restarts pods, so a better config is worth it only when
its predicted gain, over the time the current load regime is expected to last, beats the
restart's lost service by a margin. Around that sit the safety rules: a minimum dwell
between changes, a cap per hour, no action on stale or thin measurements, a rollback
when new pods do not become Ready in time and a cooldown after it, and the modes
(Auto applies, Advise only recommends, Fixed and Off never change anything). With two or
more replicas a change is first a canary on one pod, and what it measures beside the rest
decides whether the fleet follows (:mod:`specops.control._canary`).

Everything here is pure: state, measurements, settings and ``now`` go in, a frozen
``Decision`` carrying the next state comes out. The caller stores the state, applies the
config, and reports the decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import pairwise

from specops.control._canary import Canary, CanaryReport, CanaryVerdict, canary_report
from specops.control._regime import PastRegime, Regime, RegimeSettings, track_regime
from specops.policy import (
    AcceptanceCurve,
    BatchDistribution,
    CostEvidence,
    CostPosterior,
    CostPrior,
    Crossover,
    LearnedCost,
    Objective,
    PolicyChoice,
    PolicyInput,
    Prompts,
    SpecConfig,
    SpeedModel,
    StepPoint,
    TpotHistogram,
    TpotSpread,
    acceptance_from_counters,
    choose,
    crossovers,
    draft_reach,
    draw_crossovers,
    predict,
    relative_gain,
    speed_model,
)
from specops.vllm import table_applies

__all__ = [
    "Action",
    "ControlInput",
    "ControlSettings",
    "ControllerState",
    "CrossoverBand",
    "Decision",
    "Mode",
    "ReasonCode",
    "Rollout",
    "ServiceModel",
    "decide",
    "expected_remaining",
]

_HOUR = 3600.0
_DURATIONS_KEPT = 5
_LENGTHS_KEPT = 16
_LOADS_KEPT = 4


class Mode(StrEnum):
    AUTO = "Auto"
    ADVISE = "Advise"
    FIXED = "Fixed"
    OFF = "Off"


class Action(StrEnum):
    """Keep: nothing better pays for a restart. Withhold: a change is held back by a rule.
    Canary: one pod is given the policy's choice, to measure it beside the fleet."""

    KEEP = "Keep"
    RECONFIGURE = "Reconfigure"
    ROLLBACK = "Rollback"
    WITHHOLD = "Withhold"
    CANARY = "Canary"


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
    PROBE = "ProbeUnmeasuredK"
    CANARY_STARTED = "CanaryStarted"
    CANARY_IN_PROGRESS = "CanaryInProgress"
    CANARY_PASSED = "CanaryPassed"
    CANARY_FAILED = "CanaryFailed"


@dataclass(frozen=True)
class ServiceModel:
    """What is known about the service without measuring it.

    ``cost`` is the step-time prior the measurements update; ``per_batch_size`` False:
    the user wants one k, never vLLM's per-batch-size table; ``replicas`` the pods the
    service runs (a canary needs two).
    """

    method: str
    cost: CostPrior
    data_parallel: int = 1
    max_batch: int = 256
    prior_acceptance: AcceptanceCurve | None = None
    per_batch_size: bool = True
    replicas: int = 1

    @property
    def table(self) -> bool:
        """Whether a per-batch-size table may be chosen: vLLM honours one and it is wanted."""
        return self.per_batch_size and table_applies(self.method, self.data_parallel)

    @property
    def one_k_reason(self) -> str:
        if not self.per_batch_size:
            return "the per-batch-size table is turned off"
        return (
            f"vLLM takes no per-batch-size table for method {self.method} with "
            f"data-parallel {self.data_parallel}"
        )


@dataclass(frozen=True)
class ControlSettings:
    """The spec's policy knobs, in seconds and fractions.

    ``min_gain``: smallest relative gain worth a restart at all. ``margin``: the gain over
    the expected regime, in seconds of full service, must exceed ``margin`` times the
    restart's lost service (``restart_cost_s`` x ``capacity_loss``; observed rollout
    durations replace the estimate once there are some). The expected remaining length of
    a regime comes from the lengths of the service's past regimes
    (:func:`expected_remaining`), clamped to ``regime_min_s``..``regime_max_s``.

    The margin's default, 1.5, is the benchmark's pick: on the short suite (two truths,
    three traces) 1.0 moved too often (flapping on the H200 bursts and shift), 2.0 sat on
    day zero's k through every burst on the H100 truth (0.58 of the oracle against 0.73).

    ``canary``: with two or more replicas a change is first measured on one pod
    (:mod:`specops.control._canary`) over ``canary_windows`` windows, at most
    ``canary_max_windows``, before the fleet follows.

    ``tpot_spread``: the prior of how far a request's TPOT strays from a config's mean
    (:mod:`specops.policy._spread`); each window's TPOT histogram measures it.
    """

    mode: Mode = Mode.AUTO
    objective: Objective = field(default_factory=Objective)
    k_min: int = 1
    k_max: int = 7
    min_gain: float = 0.05
    margin: float = 1.5
    restart_cost_s: float = 300.0
    capacity_loss: float = 1.0
    min_dwell_s: float = 900.0
    max_reconfigurations_per_hour: int = 4
    max_staleness_s: float = 120.0
    min_drafts: int = 2000
    min_load_samples: int = 10
    rollout_timeout_s: float = 1800.0
    rollback_cooldown_s: float = 3600.0
    regime_min_s: float = 600.0
    regime_max_s: float = 3600.0
    regime: RegimeSettings = field(default_factory=RegimeSettings)
    confidence_z: float = 1.0
    keep_draft_gain: float = 0.01
    gain_confidence: float = 0.8
    posterior_draws: int = 16
    canary: bool = True
    canary_windows: int = 3
    canary_max_windows: int = 8
    tpot_spread: TpotSpread = field(default_factory=TpotSpread)

    def __post_init__(self) -> None:
        if self.margin < 0 or self.min_gain < 0:
            raise ValueError("margin and min_gain must be >= 0")
        if not 0.5 <= self.gain_confidence < 1.0 or self.posterior_draws < 2:
            raise ValueError("gain_confidence must be in [0.5, 1) and posterior_draws >= 2")
        if not 0.0 <= self.capacity_loss <= 1.0:
            raise ValueError(f"capacity_loss must be in [0, 1], got {self.capacity_loss}")
        if self.regime_min_s > self.regime_max_s:
            raise ValueError("regime_min_s must be <= regime_max_s")
        if not 2 <= self.canary_windows <= self.canary_max_windows:
            raise ValueError("canary_windows must be in [2, canary_max_windows]")


@dataclass(frozen=True)
class ControlInput:
    """What a decision reads: one measurement window of the whole service, from the
    engines' own counters (the pods' observations aggregated, see ``service_window``).

    ``load`` is the running-request distribution over the window (None if nothing was
    sampled); ``window_s`` the window's length, one decision's cadence; ``num_drafts`` and
    ``accepted_per_position`` are counter increases over it; ``pods_ready`` says whether
    every pod runs the config in force and is Ready. ``problem`` says why there are no
    usable measurements at all (empty when there are). ``cost_points`` are the window's
    measured steps, for the step-time posterior; ``prompts`` the prompt tokens computed
    per output token and per prompt; ``tpot_s`` the mean time per output token,
    ``tpot_histogram`` the requests' TPOTs by bucket (how far they spread around it).
    ``canary`` is the same window of the canary's pods, while one runs (None when it gave
    no reading), measured apart from the rest.
    """

    window_end: float
    load: BatchDistribution | None
    context_tokens: float
    num_drafts: float
    accepted_per_position: tuple[float, ...]
    window_s: float
    pods_ready: bool = True
    problem: str = ""
    cost_points: tuple[StepPoint, ...] = ()
    prompts: Prompts = field(default_factory=Prompts)
    tpot_s: float | None = None
    tpot_histogram: TpotHistogram | None = None
    canary: ControlInput | None = None


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
    cost_evidence: CostEvidence = field(default_factory=CostEvidence)
    regime_lengths: tuple[float, ...] = ()
    past_regimes: tuple[PastRegime, ...] = ()
    """The last ``len(past_regimes)`` past regimes, oldest first: the last of
    ``regime_lengths`` are their lengths."""
    canary: Canary | None = None
    """The canary in progress: one pod runs its config beside the fleet."""
    refuted: Canary | None = None
    """The last canary taken back: its config is not tried beside the same one again until
    the load regime changes (the prediction that chose it is what it refuted)."""

    @classmethod
    def initial(cls, config: SpecConfig) -> ControllerState:
        return cls(config=config, last_good=config)


@dataclass(frozen=True)
class CrossoverBand:
    """The crossover of ``k`` under the step-time posterior: its 10th and 90th percentiles.

    None is "beyond the largest batch" (k pays everywhere in that draw).
    """

    k: int
    low: int | None
    high: int | None


@dataclass(frozen=True)
class Decision:
    """One decision, taken or withheld, with the state to carry to the next one.

    ``config`` is what the pods should run after it; ``recommended`` what the policy
    would choose; ``predicted_gain`` its relative gain over the config in force at the
    posterior mean, ``likely_gain`` the gain it beats with ``gain_confidence`` under the
    posterior (what the restart rule uses), and ``gain_s`` that gain over the expected
    regime, in seconds of full service, to set against ``restart_cost_s``.
    ``cost_measured`` says whether the step-time model has seen data or is the prior;
    ``prior_crossovers`` are what the profile alone predicts, to set beside the measured;
    ``window_acceptance`` is this window's per-position acceptance, corrected for the
    positions a per-batch-size table did not draft (None when the window measured none).
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
    likely_gain: float | None = None
    crossover_bands: tuple[CrossoverBand, ...] = ()
    cost_measured: bool = False
    prior_crossovers: tuple[Crossover, ...] = ()
    window_acceptance: AcceptanceCurve | None = None
    canary: CanaryReport | None = None
    """What the canary in progress, or the one this decision settled, measured."""
    tpot_spread: TpotSpread | None = None
    """The per-request TPOT spread the policy priced goodput with: the window's measured,
    or the prior where it measured none (its ``measured_from`` says which)."""


def _restart_cost(state: ControllerState, settings: ControlSettings) -> float:
    seen = state.rollout_durations
    restart = sum(seen) / len(seen) if seen else settings.restart_cost_s
    return restart * settings.capacity_loss


def _past_hour(state: ControllerState, now: float) -> list[float]:
    """The times of the changes of the past hour (the hourly cap counts them)."""
    return [t for t in state.changes if now - t < _HOUR]


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of posterior draws' ``values`` (the nearest draw below it)."""
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


@dataclass(frozen=True)
class _Evaluation:
    """The policy's choice for the regime, and what it would gain over the config in force.

    ``likely`` is the gain it beats with the asked confidence under the step-time posterior,
    ``mean_gain`` the gain at the posterior mean; a probe (a k never measured at this load)
    is judged at the mean. ``horizon`` is how much longer the regime is expected to last,
    or for a change that follows a ramp to where it is heading the ramp (``ramp``, see
    :func:`_with_the_trend`); ``lasting`` how long what a probe measures is counted for
    (see :func:`_lasting`);
    ``upside`` what a probe of off may gain, and ``upside_if`` on what condition, in words
    (empty: with the chance the asked confidence leaves).
    """

    choice: PolicyChoice
    likely: float
    bands: tuple[CrossoverBand, ...]
    prior_crossovers: tuple[Crossover, ...]
    mean_gain: float
    horizon: float
    probe: bool
    lasting: float
    upside: float | None = None
    upside_if: str = ""
    ramp: bool = False

    @property
    def gain(self) -> float:
        """The gain the restart rule weighs: a probe of off is weighed at its upside."""
        if self.upside is not None:
            return self.upside
        return self.mean_gain if self.probe else self.likely

    @property
    def counted_s(self) -> float:
        """The seconds the gain is counted over: the expected regime, or for a probe the
        longer time what it measures serves."""
        return self.lasting if self.probe else self.horizon

    @property
    def gain_s(self) -> float:
        """That gain over the seconds it is counted for, in seconds of full service."""
        return self.gain * self.counted_s


@dataclass(frozen=True)
class _Outcome:
    """What the decision does and why, before it is written out as a :class:`Decision`:
    the state after it, and the evaluation of the policy's choice when there was one."""

    action: Action
    code: ReasonCode
    state: ControllerState
    reason: str
    evaluation: _Evaluation | None = None
    new_regime: bool = False
    window_acceptance: AcceptanceCurve | None = None
    canary: CanaryReport | None = None


def _holding(state: ControllerState, code: ReasonCode, why: str) -> _Outcome:
    """Withhold any change, keeping the config in force, for ``why``."""
    return _Outcome(Action.WITHHOLD, code, state, f"holding {state.config.describe()}: {why}")


def _follow_rollout(
    state: ControllerState,
    rollout: Rollout,
    measured: ControlInput,
    settings: ControlSettings,
    now: float,
) -> _Outcome:
    elapsed = now - rollout.started_at
    if measured.pods_ready:
        durations = (*state.rollout_durations, elapsed)[-_DURATIONS_KEPT:]
        done = replace(state, rollout=None, last_good=rollout.target, rollout_durations=durations)
        return _Outcome(
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
        return _Outcome(
            Action.ROLLBACK,
            ReasonCode.ROLLOUT_FAILED,
            back,
            f"pods with {rollout.target.describe()} not Ready after {elapsed:.0f}s "
            f"(limit {settings.rollout_timeout_s:.0f}s): back to the last good config "
            f"{rollout.previous.describe()}, kept for {settings.rollback_cooldown_s:.0f}s",
        )
    return _Outcome(
        Action.WITHHOLD,
        ReasonCode.ROLLOUT_IN_PROGRESS,
        state,
        # No running count of seconds: a message that changes at every poll would rewrite
        # status at every poll of the rollout (status.controller.rollout says since when).
        f"rollout to {rollout.target.describe()} in progress: its pods have "
        f"{settings.rollout_timeout_s:.0f}s to become Ready",
    )


def _measure_acceptance(
    state: ControllerState,
    measured: ControlInput,
    load: BatchDistribution,
    cost: LearnedCost,
    settings: ControlSettings,
) -> AcceptanceCurve | None:
    """The window's acceptance, or None when it had too few drafts to trust."""
    if measured.num_drafts < settings.min_drafts or state.config.is_off:
        return None
    reach = draft_reach(state.config, load, cost, measured.context_tokens)
    try:
        return acceptance_from_counters(measured.num_drafts, measured.accepted_per_position, reach)
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
    measured: ControlInput,
    service: ServiceModel,
    cost: LearnedCost,
    settings: ControlSettings,
    spread: TpotSpread,
) -> PolicyChoice:
    curve, drafts = acceptance
    return choose(
        PolicyInput(
            acceptance=curve,
            drafts_seen=int(drafts),
            load=regime.load,
            cost=cost,
            context_tokens=measured.context_tokens,
            prompts=measured.prompts,
            spread=spread,
            current=state.config,
            objective=settings.objective,
            k_min=settings.k_min,
            k_max=settings.k_max,
            max_batch=service.max_batch,
            confidence_z=settings.confidence_z,
            min_gain=settings.keep_draft_gain,
            per_batch_size=service.table,
            one_k_reason=service.one_k_reason,
        )
    )


def _percentile(values: list[int | None], q: float, beyond: int) -> int | None:
    ordered = sorted(beyond if v is None else v for v in values)
    found = ordered[min(int(q * len(ordered)), len(ordered) - 1)]
    return None if found >= beyond else found


def _under_posterior(
    choice: PolicyChoice,
    current: SpecConfig,
    load: BatchDistribution,
    models: tuple[SpeedModel, ...],
    settings: ControlSettings,
    max_batch: int,
) -> tuple[float, tuple[CrossoverBand, ...]]:
    """The gain the choice beats with ``gain_confidence``, and each k's crossover band.

    Each draw of step-time coefficients (``models``, one speed model a draw) re-predicts
    the choice against the config in force; the gain used is the draws' (1 - confidence)
    quantile, never above the mean's, so a change acts only when it is likely to pay, not
    only on average.
    """
    ks = tuple(c.k for c in choice.crossovers)
    gains: list[float] = []
    batches: dict[int, list[int | None]] = {k: [] for k in ks}
    for model in models:
        if choice.config != current:
            gains.append(
                relative_gain(
                    predict(choice.config, load, model, settings.objective),
                    predict(current, load, model, settings.objective),
                )
            )
    for drawn in draw_crossovers(models, ks, max_batch):
        for crossover in drawn:
            batches[crossover.k].append(crossover.batch)
    likely = choice.gain_over_current
    if gains:
        likely = min(likely, _quantile(gains, 1.0 - settings.gain_confidence))
    bands = tuple(
        CrossoverBand(
            k,
            _percentile(batches[k], 0.1, max_batch + 1),
            _percentile(batches[k], 0.9, max_batch + 1),
        )
        for k in ks
    )
    return likely, bands


def expected_remaining(lengths: tuple[float, ...], age: float, settings: ControlSettings) -> float:
    """How much longer the current regime is expected to last, from the service's history.

    Of the past regimes that outlived this one's age, the mean of what they had left;
    with none (no history, or the longest regime yet) the age itself, as a regime that
    has lasted a while tends to last as long again. Clamped to regime_min_s..regime_max_s.
    """
    longer = [length - age for length in lengths if length > age]
    expected = sum(longer) / len(longer) if longer else age
    return min(max(expected, settings.regime_min_s), settings.regime_max_s)


def _lasting(
    choice: PolicyChoice,
    state: ControllerState,
    regime: Regime,
    likely: float,
    horizon: float,
    settings: ControlSettings,
) -> float:
    """How long what a probe of ``choice`` measures is counted for.

    A change for a gain pays only while its regime lasts; the next regime decides afresh.
    A probe's config does too, but what it measures stays in the posterior, and every
    later decision at this load prices that k from data rather than from the prior's split
    of the step. Counted over one regime, a probe that could turn a losing k into its best
    neighbour never pays its restart on a fresh service: at 128 in flight on the
    benchmark's H200 truth, speculation stayed at k = 3 for a whole run, with 0.78 of the
    goodput of off. So where the probe tests the prior where it is known to lean, it is
    counted over ``regime_max_s``, the longest the regime's ``horizon`` can be:

    - the choice drafts less at the load's busiest batch size than the config in force:
      the profile prices a drafted token at its head's compute alone, so the posterior
      leans towards drafting more, and a probe towards drafting less is the one that can
      find what that hides;
    - the draws doubt even the sign of the gain (``likely`` below 0): where they are sure
      of it, the measurement teaches later decisions little, and the change is an
      ordinary one;
    - the load will be priced again: its regime is not doubted, not drifting, and not one
      step of a ramp;
    - the gain is one of speed: the TPOT target binds on neither config (:func:`_binds`).
      Where it binds, the gain rests on the share of requests within the target, the tail
      of their TPOTs, which step times do not teach: on an L40S truth kept outside the
      repository, at 64 in flight with k = 3, k = 2 was +19 % at the mean and served 0.40
      of k = 3's goodput (303 tok/s against 751), and the run restarted twice more.

    Elsewhere a probe pays by its regime alone, as any change. Counted past their regime,
    probes to a longer k cost the benchmark's steady runs at 4 to 16 in flight a restart
    each for a k no better than the one they left, and speculation off probed on the 70B
    ramp's climb was still in force as the load fell back (0.74 of the oracle against 0.85).
    """
    busiest = regime.load.busiest
    drafts_less = choice.config.k_for_batch(busiest) < state.config.k_for_batch(busiest)
    settled = (
        regime.doubts == 0 and regime.drift == 0 and not _ramping(state.past_regimes, regime.load)
    )
    if likely >= 0.0 or not drafts_less or not settled or _binds(choice, settings):
        return horizon
    return settings.regime_max_s


def _binds(choice: PolicyChoice, settings: ControlSettings) -> bool:
    """Whether the TPOT target binds on the choice or the config in force under the
    posterior mean: more than ``min_gain`` of their tokens miss it."""
    return any(
        p.goodput < (1.0 - settings.min_gain) * p.throughput
        for p in (choice.predicted, choice.current)
    )


def _may_probe(state: ControllerState, regime: Regime) -> bool:
    """Whether a probe may run now: never as the second change of one load regime.

    A probe is an experiment the likely gain does not pay for; after a change in this
    regime (a probe or a gain that paid) another one would reconfigure the same load twice.
    What the first change measured stays, and a gain that is likely still acts.
    """
    return state.last_change_at is None or state.last_change_at < regime.started_at


def _worth_probing(
    choice: PolicyChoice,
    load: BatchDistribution,
    state: ControllerState,
    mean_gain: float,
    likely: float,
    horizon: float,
    lasting: float,
    settings: ControlSettings,
) -> bool:
    """Whether to try the choice to measure it: a probe, charged as any restart.

    Points at one k cannot tell how step time grows with k, so the posterior can leave a
    change likely on average yet unlikely at the confidence asked. When the k the
    choice would run at this load's busiest batch size was never measured, and the
    mean gain pays the restart over the time what it measures lasts (``lasting``),
    the change itself is the experiment: its windows teach the posterior that k, and if
    it proves worse the next decision takes it back.
    """
    restart = settings.margin * _restart_cost(state, settings)
    pays_at_mean = mean_gain >= settings.min_gain and mean_gain * lasting > restart
    pays_likely = likely >= settings.min_gain and likely * horizon > restart
    if pays_likely or not pays_at_mean:
        return False
    k = choice.config.k_for_batch(load.busiest)
    return k not in state.cost_evidence.ks


def _cost_words(state: ControllerState) -> str:
    evidence = state.cost_evidence
    if evidence.points == 0:
        return "step time: the profile's prior, nothing measured yet."
    ks = ", ".join(str(k) for k in evidence.ks)
    return (
        f"step time: measured, {evidence.points} intervals of {evidence.steps:.0f} steps "
        f"(at k = {ks}; 0 is speculation off)."
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
    recent = _past_hour(state, now)
    if len(recent) >= settings.max_reconfigurations_per_hour:
        return ReasonCode.HOURLY_CAP, (
            f"{len(recent)} reconfigurations in the past hour reach the cap of "
            f"{settings.max_reconfigurations_per_hour}"
        )
    return None


def _track(
    state: ControllerState,
    measured: ControlInput,
    load: BatchDistribution,
    cost: LearnedCost,
    settings: ControlSettings,
) -> tuple[ControllerState, Regime, bool, AcceptanceCurve | None]:
    """The state with the window's regime and acceptance learnt; whether the regime is new;
    the window's acceptance (corrected for positions a table cut short; None if unmeasured)."""
    window_curve = _measure_acceptance(state, measured, load, cost, settings)
    # Past the positions this window reached, what a longer k measured before.
    learnt = (
        window_curve.extended(state.acceptance)
        if window_curve is not None and state.acceptance is not None
        else window_curve
    )
    regime, new_regime = track_regime(
        state.regime,
        load,
        learnt,
        measured.num_drafts,
        measured.window_end,
        settings.regime,
        measured.tpot_histogram.count if measured.tpot_histogram is not None else None,
        measured.context_tokens,
    )
    if new_regime and state.regime is not None:
        ended = regime.started_at - state.regime.started_at
        state = replace(
            state,
            regime_lengths=(*state.regime_lengths, ended)[-_LENGTHS_KEPT:],
            past_regimes=(*state.past_regimes, state.regime.past())[-_LOADS_KEPT:],
        )
    state = replace(state, regime=regime)
    if learnt is not None:
        state = replace(state, acceptance=learnt, acceptance_drafts=measured.num_drafts)
    return state, regime, new_regime, window_curve


def _evaluate(
    state: ControllerState,
    regime: Regime,
    acceptance: tuple[AcceptanceCurve, float],
    measured: ControlInput,
    service: ServiceModel,
    posterior: CostPosterior,
    cost: LearnedCost,
    settings: ControlSettings,
    now: float,
) -> _Evaluation:
    """The policy's choice for the regime (with ``cost``, the posterior's mean), its gain
    under the posterior, and the crossovers the profile alone predicts, to set beside the
    measured ones."""
    spread = settings.tpot_spread.measured(
        measured.tpot_histogram, acceptance[0], state.config.k_for_batch(regime.load.busiest)
    )
    choice = _policy(state, regime, acceptance, measured, service, cost, settings, spread)
    # One speed model a posterior draw, shared by both looks at the draws (their memo too).
    models = tuple(
        SpeedModel(drawn, choice.acceptance, measured.context_tokens, measured.prompts, spread)
        for drawn in posterior.draws(settings.posterior_draws, seed=state.cost_evidence.points)
    )
    likely, bands = _under_posterior(
        choice, state.config, regime.load, models, settings, service.max_batch
    )
    prior_model = SpeedModel(
        CostPosterior.of(service.cost, CostEvidence()).model(),
        choice.acceptance,
        measured.context_tokens,
        measured.prompts,
        spread,
    )
    prior_crossovers = crossovers(
        prior_model, tuple(c.k for c in choice.crossovers), service.max_batch
    )
    mean_gain = choice.gain_over_current
    rest = expected_remaining(state.regime_lengths, regime.age(now), settings)
    ramp_s = _with_the_trend(choice, state, regime, now, settings, models, service.max_batch)
    horizon = max(rest, ramp_s)
    # What a probe measures is counted as it always is: the ramp moves its load away.
    lasting = _lasting(choice, state, regime, likely, rest, settings)
    may_probe = _may_probe(state, regime)
    probe = may_probe and _worth_probing(
        choice, regime.load, state, mean_gain, likely, horizon, lasting, settings
    )
    evaluation = _Evaluation(
        choice,
        likely,
        bands,
        prior_crossovers,
        mean_gain,
        horizon,
        probe,
        lasting,
        ramp=ramp_s > rest,
    )
    if may_probe:
        evaluation = _probe_off(state, evaluation, regime.load, models, posterior, settings)
    return _over_the_mixture(
        state, regime, evaluation, acceptance, measured, service, cost, models, settings
    )


def _mixed(spans: list[tuple[PastRegime, float]]) -> BatchDistribution:
    """The loads of ``spans`` weighted by their seconds."""
    weights: dict[int, float] = {}
    for span, seconds in spans:
        for batch, weight in span.load.weights:
            weights[batch] = weights.get(batch, 0.0) + weight * seconds
    return BatchDistribution.from_weights(
        weights, samples=sum(span.load.samples for span, _ in spans)
    )


def _at_context(at: dict[float, SpeedModel], model: SpeedModel, context: float) -> SpeedModel:
    """``model`` with its requests holding ``context`` tokens each, one model a context in
    ``at``."""
    found = at.get(context)
    if found is None:
        found = at[context] = SpeedModel(
            model.cost, model.acceptance, context, model.prompts, model.spread
        )
    return found


def _over_the_mixture(
    state: ControllerState,
    regime: Regime,
    evaluation: _Evaluation,
    acceptance: tuple[AcceptanceCurve, float],
    measured: ControlInput,
    service: ServiceModel,
    cost: LearnedCost,
    models: tuple[SpeedModel, ...],
    settings: ControlSettings,
) -> _Evaluation:
    """The evaluation, or one config for the service's recent mixture of loads.

    A change made for this regime is made again, the other way, when the load it left
    comes back. Over the past regimes and this one (each for its seconds, this one for its
    expected rest, each at the context per request it measured, which moves with the
    load), the best config of each regime, with a restart (and the margin) wherever it
    differs from the one before, and the windows that confirm each new regime served by
    the config before, is set against the one config best over all of them: where the one
    config does as well, the alternation is served without restarting each time, and the
    choice is that config, or the config in force when it is that config. Its gain over
    the config in force is judged as any change's: the mean's, and the one it beats with
    the asked confidence under the posterior draws (``models``), since the one config may
    run at a load where it was never measured. A probe is set against the mixture too: a
    config tried for this regime alone is no experiment worth its restart when the
    mixture's one config serves the loads that come back better. On a ramp (see
    :func:`_ramping`) the past loads are behind the service, not coming back, and the
    choice is this regime's own.
    """
    choice = evaluation.choice
    lengths = state.regime_lengths[-len(state.past_regimes) :] if state.past_regimes else ()
    past = list(zip(state.past_regimes, lengths, strict=True))
    if len(past) < 2 or choice.config == state.config or _ramping(state.past_regimes, regime.load):
        return evaluation
    # Each regime priced at the context its requests held; this one, and one that did not
    # measure it, at the window's.
    spans = [
        *(
            (PastRegime(span.load, span.context_tokens or measured.context_tokens), s)
            for span, s in past
        ),
        (PastRegime(regime.load, measured.context_tokens), evaluation.horizon),
    ]
    model = speed_model(
        cost, choice.acceptance, measured.context_tokens, measured.prompts, choice.spread
    )
    at: dict[float, SpeedModel] = {model.context_tokens: model}

    def value(config: SpecConfig, span: PastRegime) -> float:
        priced = _at_context(at, model, span.context_tokens)
        return predict(config, span.load, priced, settings.objective).value

    def best(span: PastRegime) -> PolicyChoice:
        return _policy(
            state,
            replace(regime, load=span.load),
            acceptance,
            replace(measured, context_tokens=span.context_tokens),
            service,
            cost,
            settings,
            choice.spread,
        )

    # This regime's best is the choice already made for it.
    bests = [*(best(span).config for span, _ in spans[:-1]), choice.config]
    restart = settings.margin * _restart_cost(state, settings)
    switching = sum(
        seconds * value(c, span) for (span, seconds), c in zip(spans, bests, strict=True)
    )
    # A change per regime acts once a new regime is confirmed: until then the config for the
    # regime before serves the new load, about half the first window and the rest.
    lag = (settings.regime.confirmations - 0.5) * measured.window_s
    switching -= sum(
        restart * value(c, span) + lag * (value(c, span) - value(before, span))
        for (span, _), c, before in zip(spans[1:], bests[1:], bests[:-1], strict=True)
        if c != before
    )
    mixed = best(PastRegime(_mixed(spans), measured.context_tokens))
    static = sum(seconds * value(mixed.config, span) for span, seconds in spans)
    if static <= 0 or static < switching:
        return evaluation
    in_force = sum(seconds * value(state.config, span) for span, seconds in spans)
    gain = static / in_force - 1.0 if in_force > 0 else 0.0
    likely = min(gain, _mixture_gain_likely(spans, mixed.config, state.config, models, settings))
    words = (
        f"one config for the recent mixture of loads ({len(past)} past regimes and this one, "
        f"{sum(seconds for _, seconds in spans):.0f}s): it serves them "
        + (
            f"{static / switching - 1.0:+.1%} against a change per regime, restarts included"
            if switching > 0
            else "where a change per regime delivers nothing once its restarts are paid"
        )
    )
    kept = replace(mixed, reason=f"{words}. {mixed.reason}")
    return replace(
        evaluation,
        choice=kept,
        likely=likely,
        mean_gain=gain,
        horizon=sum(seconds for _, seconds in spans),
        probe=False,
        upside=None,
        upside_if="",
    )


def _with_the_trend(
    choice: PolicyChoice,
    state: ControllerState,
    regime: Regime,
    now: float,
    settings: ControlSettings,
    models: tuple[SpeedModel, ...],
    max_batch: int,
) -> float:
    """How long a change that follows a ramp is expected to keep its gain: the ramp's age
    so far (0 where the load is not ramping or the change does not follow it).

    A ramp's regimes are short (each lasts until the load has moved past its average), so
    the regime's expected rest undercounts what a change made on it serves: a k that drafts
    less on a climb (more on a fall) gains more, not less, as the load goes on the same
    way, and keeps its gain until the load turns back. How long that will be is unknown;
    a trend that has lasted a while tends to last as long again, as a regime does. This
    holds only for the config the ramp's far end wants (the largest batch on a climb, one
    on a fall; :func:`_best_where_heading`): one short of it is changed again further on,
    and its gain lasts until then (on the day trace's 70B truth, k = 4 for the evening and
    k = 7 for the night a regime later, 0.857 of the oracle against 0.873). And a load
    already at the end of its range goes no further: on the ramp's 70B truth, off chosen
    so on the plateau at 256 in flight stayed 341 s into the fall, the saturated engine's
    batch still near 250.
    """
    run, climbing = _ramp_run(state.past_regimes, regime.load)
    if run < 2:
        return 0.0
    busiest = regime.load.busiest
    if (busiest >= max_batch) if climbing else (busiest <= 1):
        return 0.0  # at the end of its range: the load can go no further that way
    new, old = choice.config.k_for_batch(busiest), state.config.k_for_batch(busiest)
    if new == old or (new < old) != climbing:
        return 0.0
    if not _best_where_heading(choice.config, max_batch if climbing else 1, models, settings):
        return 0.0
    seconds = regime.age(now) + sum(state.regime_lengths[-run:])
    return min(seconds, settings.regime_max_s)


def _best_where_heading(
    config: SpecConfig, batch: int, models: tuple[SpeedModel, ...], settings: ControlSettings
) -> bool:
    """Whether ``config`` is the best of off and every single k at ``batch`` in at least
    ``gain_confidence`` of the posterior draws (``models``): where the ramp is heading no
    load was measured, and a change made for it early blocks the better one the load,
    once there, would measure. Judged at the posterior mean alone, on an H200 truth with a
    draft that costs almost nothing, a ramp's climb moved to k = 1 where the truth wants
    off, which came only 600 s later: 0.849 of the oracle against 0.867 without the rule."""
    load = BatchDistribution.constant(batch)
    candidates = {
        config,
        SpecConfig.off(),
        *(SpecConfig.static(k) for k in range(1, settings.k_max + 1)),
    }
    wins = 0
    for model in models:
        values = {c: predict(c, load, model, settings.objective).value for c in candidates}
        wins += values[config] >= max(values.values())
    return wins >= settings.gain_confidence * len(models)


def _ramp_run(past: Sequence[PastRegime], load: BatchDistribution) -> tuple[int, bool]:
    """How many of the newest past regimes each moved the mean batch the same way into the
    next one (this one last), and whether that way is up."""
    means = [*(before.load.mean for before in past), load.mean]
    steps = [after - before for before, after in pairwise(means)]
    up = bool(steps) and steps[-1] > 0
    run = 0
    for step in reversed(steps):
        if step == 0 or (step > 0) != up:
            break
        run += 1
    return run, up


def _ramping(past: Sequence[PastRegime], load: BatchDistribution) -> bool:
    """Whether the last two regimes and this one moved the load one way: each one's mean
    batch above the one before, or each below. Alternating loads (bursts, a load that
    comes back) break the run; a ramp's regimes do not; fewer than two past regimes make
    no ramp."""
    return _ramp_run(past, load)[0] >= 2


def _mixture_gain_likely(
    spans: list[tuple[PastRegime, float]],
    config: SpecConfig,
    current: SpecConfig,
    models: tuple[SpeedModel, ...],
    settings: ControlSettings,
) -> float:
    """The gain of ``config`` over ``current`` through ``spans`` (each at its own context)
    that the posterior draws beat with ``gain_confidence``."""
    gains = []
    for model in models:
        at: dict[float, SpeedModel] = {model.context_tokens: model}
        new = old = 0.0
        for span, seconds in spans:
            priced = _at_context(at, model, span.context_tokens)
            new += seconds * predict(config, span.load, priced, settings.objective).value
            old += seconds * predict(current, span.load, priced, settings.objective).value
        gains.append(new / old - 1.0 if old > 0 else 0.0)
    return _quantile(gains, 1.0 - settings.gain_confidence)


def _probe_off(
    state: ControllerState,
    evaluation: _Evaluation,
    load: BatchDistribution,
    models: tuple[SpeedModel, ...],
    posterior: CostPosterior,
    settings: ControlSettings,
) -> _Evaluation:
    """The evaluation, or a probe of speculation off when off was never measured and may
    well beat what runs now.

    While every step drafts, the draft's fixed cost and the target's cannot be told
    apart: both are paid on every step. What off would cost then comes from the prior's
    split, and on an engine unlike the profile that split can keep a losing k for ever.
    So off is tried once where the posterior mean itself expects off to pay over the
    config in force (the draws are no better guide there: their truncation at 0 leans
    along the very split in doubt), off beats the policy's choice with the chance the
    asked confidence leaves (the choice wins only on the unmeasured split), and the
    experiment is worth it under the posterior draws (``models``): what off may gain over
    the choice (the draws' mean where it wins), over as long as a probe of the choice would
    be counted (the evaluation's ``lasting``, :func:`_lasting`), beats the restart (with
    the margin) and what it may lose until it can be taken back (the mean where it loses,
    over the minimum dwell). Off drafts less than any choice, but past the regime it is
    counted only where the choice would be: in place of a choice the draws are sure of,
    an experiment counted so trades a trusted change for a doubted one (on the day trace's
    H100 truth it displaced k = 1 at midday: 8 275 tok/s there against 9 042). Where the
    choice restarts the pods anyway, the restart off adds is the one that takes it back,
    paid in the draws where it loses. Its windows measure the target alone, and a worse
    result is taken back. Where the policy's choice is off itself but the draws leave it
    unlikely, the same test decides, with off set against the config in force: the draws'
    doubt lies along that split.
    """
    choice = evaluation.choice
    if state.config.is_off or 0 in state.cost_evidence.ks:
        return evaluation
    if choice.config.is_off and evaluation.likely >= settings.min_gain:
        return evaluation  # likely enough as it is: the restart rule judges it
    mean_gain = relative_gain(choice.baseline, choice.current)
    if mean_gain < settings.min_gain:
        return _probe_refuted_split(
            state, evaluation, load, models[0], posterior, mean_gain, settings
        )
    over_current: list[float] = []
    over_choice: list[float] = []
    for model in models:
        off_speed = predict(SpecConfig.off(), load, model, settings.objective)
        over_current.append(
            relative_gain(off_speed, predict(state.config, load, model, settings.objective))
        )
        if not choice.config.is_off:
            over_choice.append(
                relative_gain(off_speed, predict(choice.config, load, model, settings.objective))
            )
    if choice.config.is_off:
        over_choice = over_current  # off is the choice: weigh it against what runs
    upside = _quantile(over_choice, settings.gain_confidence)
    may_gain = sum(max(g, 0.0) for g in over_choice) / len(models) * evaluation.lasting
    may_lose = sum(max(-g, 0.0) for g in over_choice) / len(models) * settings.min_dwell_s
    restart = settings.margin * _restart_cost(state, settings)
    if not choice.config.is_off and choice.config != state.config:
        # The choice restarts too: off costs a restart more only where it loses and is
        # taken back.
        restart *= sum(1 for g in over_choice if g < 0.0) / len(models)
    if upside < settings.min_gain or may_gain <= restart + may_lose:
        return evaluation
    return _off_probed(
        evaluation,
        choice.reason  # off already; the words on the gain say it is a probe
        if choice.config.is_off
        else f"speculation off, to measure it; the policy's choice at the mean: {choice.reason}",
        mean_gain,
        _quantile(over_current, 1.0 - settings.gain_confidence),
        _quantile(over_current, settings.gain_confidence),
    )


def _off_probed(
    evaluation: _Evaluation,
    reason: str,
    mean_gain: float,
    likely: float,
    upside: float,
    upside_if: str = "",
) -> _Evaluation:
    """The evaluation with speculation off as its choice, a probe, for ``reason``."""
    choice = evaluation.choice
    probe = replace(choice, config=SpecConfig.off(), predicted=choice.baseline, reason=reason)
    return replace(
        evaluation,
        choice=probe,
        mean_gain=mean_gain,
        likely=likely,
        probe=True,
        upside=upside,
        upside_if=upside_if,
    )


def _probe_refuted_split(
    state: ControllerState,
    evaluation: _Evaluation,
    load: BatchDistribution,
    model: SpeedModel,
    posterior: CostPosterior,
    at_mean: float,
    settings: ControlSettings,
) -> _Evaluation:
    """The evaluation, or a probe of speculation off where the measured steps refute the
    profile and the split of the step it leaves could hide a draft that costs more than
    drafting gains.

    The posterior puts a step longer than the prior's mostly on the terms the prior knows
    least, the target's; a step beyond ``outlier_ratio`` times the prior's is no error of
    the profile's figures but an engine unlike it, and where every point ran one k, which
    part is unlike cannot be told. So the split's other end is priced too: all the excess
    the draft's (:meth:`CostPosterior.draft_excess`). Off is probed where, priced so, what
    it gains over the config in force, over as long as it is counted (the evaluation's
    ``lasting``), beats a restart there and one back (with the margin) and what the
    posterior mean says it loses (``at_mean``, off over the config in force) until it can
    be taken back (over the minimum dwell). On a truth whose draft costs 50 ms a step and
    20 ms a position (the profile's: under 1 ms), k = 3 was kept at every load below 192
    in flight, at about a tenth of what off served or less.
    """
    ratio = posterior.evidence.times_prior(posterior.prior)
    if ratio is None or ratio <= posterior.prior.outlier_ratio:
        return evaluation
    excess = posterior.draft_excess()
    if excess is None:
        return evaluation
    priced = SpeedModel(excess, model.acceptance, model.context_tokens, model.prompts, model.spread)
    off = predict(SpecConfig.off(), load, priced, settings.objective)
    upside = relative_gain(off, predict(state.config, load, priced, settings.objective))
    choice = evaluation.choice
    loss = max(-at_mean, 0.0) * settings.min_dwell_s
    restarts = 2.0 * settings.margin * _restart_cost(state, settings)
    if upside < settings.min_gain or upside * evaluation.lasting <= restarts + loss:
        return evaluation
    return _off_probed(
        evaluation,
        f"speculation off, to measure it: the steps took {ratio:.1f}x the profile's, more "
        f"than its figures can be wrong by, and were the excess the draft's, off would gain "
        f"{upside:+.0%}; the policy's choice at the posterior mean: {choice.reason}",
        at_mean,
        at_mean,
        upside,
        "were the excess the draft's",
    )


def _keep_words(state: ControllerState, evaluation: _Evaluation, settings: ControlSettings) -> str:
    """Why the config in force stays when the choice is it, or gains too little."""
    choice, gain = evaluation.choice, evaluation.gain
    verdict = (
        "is the best config"
        if choice.config == state.config
        else f"stays: {choice.config.describe()} would gain only {gain:+.1%} with "
        f"{settings.gain_confidence:.0%} confidence ({evaluation.mean_gain:+.1%} at the mean), "
        f"below the {settings.min_gain:.0%} minimum"
    )
    return f"{state.config.describe()} {verdict}. {choice.reason} {_cost_words(state)}"


def _pays_words(
    state: ControllerState, evaluation: _Evaluation, restart_cost: float, settings: ControlSettings
) -> str:
    """The gain set against the restart, in words."""
    gain, mean_gain, likely = evaluation.gain, evaluation.mean_gain, evaluation.likely
    if evaluation.upside is not None:
        condition = evaluation.upside_if or f"with {1 - settings.gain_confidence:.0%} chance"
        likely_words = (
            f"{mean_gain:+.1%} at the mean, but {evaluation.upside:+.1%} {condition}: a "
            f"probe, since speculation off was "
            f"never measured and what drafting costs cannot be told apart from the rest of "
            f"the step without it"
        )
    elif evaluation.probe:
        likely_words = (
            f"{mean_gain:+.1%} at the mean, only {likely:+.1%} with "
            f"{settings.gain_confidence:.0%} confidence: a probe, since the step time at the "
            f"k it runs at this load was never measured"
        )
    else:
        likely_words = (
            f"{gain:+.1%} ({settings.gain_confidence:.0%} likely; {mean_gain:+.1%} at the mean)"
        )
    over = (
        f"over the {evaluation.counted_s:.0f}s what it measures is counted for"
        if evaluation.probe
        else f"over an expected {evaluation.horizon:.0f}s of this ramp (as long as it has lasted)"
        if evaluation.ramp
        else f"over an expected {evaluation.horizon:.0f}s of this regime"
    )
    return (
        f"{likely_words} {over} is "
        f"{evaluation.gain_s:.0f}s of service against {restart_cost:.0f}s lost to a restart "
        f"(margin {settings.margin:g}x); {_cost_words(state)}"
    )


def _judge(
    state: ControllerState,
    evaluation: _Evaluation,
    restart_cost: float,
    settings: ControlSettings,
    now: float,
    replicas: int,
) -> _Outcome:
    """Keep, withhold or reconfigure to the policy's choice: the mode, the gain against the
    restart, then the rules that forbid a change now. With two or more replicas the change
    starts as a canary on one pod, and the fleet follows only what it measures."""
    choice = evaluation.choice

    def kept(action: Action, code: ReasonCode, reason: str) -> _Outcome:
        return _Outcome(action, code, state, reason, evaluation)

    if settings.mode in (Mode.FIXED, Mode.OFF):
        return kept(
            Action.KEEP,
            ReasonCode.MODE_FROZEN,
            f"mode {settings.mode.value} never changes the config; the policy would choose "
            f"{choice.config.describe()} ({evaluation.gain:+.1%}): {choice.reason}",
        )
    if choice.config == state.config:
        return kept(Action.KEEP, ReasonCode.ALREADY_BEST, _keep_words(state, evaluation, settings))
    refuted = state.refuted
    if refuted is not None and (refuted.config, refuted.baseline) == (choice.config, state.config):
        return kept(
            Action.KEEP,
            ReasonCode.CANARY_FAILED,
            f"{state.config.describe()} stays: the policy predicts {evaluation.mean_gain:+.1%} "
            f"for {choice.config.describe()}, but in this load regime "
            f"{_report(refuted, settings).describe()}; it is tried again when the regime changes",
        )
    if evaluation.gain < settings.min_gain:
        return kept(
            Action.KEEP, ReasonCode.GAIN_TOO_SMALL, _keep_words(state, evaluation, settings)
        )
    pays = _pays_words(state, evaluation, restart_cost, settings)
    if evaluation.gain_s <= settings.margin * restart_cost:
        return kept(
            Action.KEEP,
            ReasonCode.RESTART_NOT_WORTH,
            f"{state.config.describe()} stays: switching to {choice.config.describe()} does not "
            f"pay: {pays}",
        )
    blocked = _gate(state, settings, now)
    if blocked is not None:
        code, rule = blocked
        return kept(
            Action.WITHHOLD,
            code,
            f"{choice.config.describe()} would pay ({pays}) but is withheld: {rule}",
        )
    if settings.mode is Mode.ADVISE:
        return kept(
            Action.WITHHOLD,
            ReasonCode.ADVISE_ONLY,
            f"mode Advise: recommending {choice.config.describe()} ({pays}); not applied. "
            f"{choice.reason}",
        )
    changes = (*_past_hour(state, now), now)
    if settings.canary and replicas >= 2:
        canary = Canary(choice.config, state.config, now, evaluation.mean_gain)
        started = replace(state, canary=canary, changes=changes, last_change_at=now)
        return _Outcome(
            Action.CANARY,
            ReasonCode.CANARY_STARTED,
            started,
            f"measuring {choice.config.describe()} on one pod of {replicas} beside "
            f"{state.config.describe()} before the fleet follows: {pays}. {choice.reason}",
            evaluation,
            canary=_report(canary, settings),
        )
    changed = replace(
        state,
        config=choice.config,
        rollout=Rollout(target=choice.config, previous=state.last_good, started_at=now),
        changes=changes,
        last_change_at=now,
    )
    return _Outcome(
        Action.RECONFIGURE,
        ReasonCode.PROBE if evaluation.probe else ReasonCode.GAIN_PAYS_RESTART,
        changed,
        f"reconfiguring {state.config.describe()} -> {choice.config.describe()}: {pays}. "
        f"{choice.reason}",
        evaluation,
    )


def _report(canary: Canary, settings: ControlSettings) -> CanaryReport:
    return canary_report(
        canary,
        windows=settings.canary_windows,
        max_windows=settings.canary_max_windows,
        min_gain=settings.min_gain,
        confidence=settings.gain_confidence,
    )


def _speedup(measured: ControlInput, settings: ControlSettings) -> float | None:
    """The window's fleet TPOT over the canary's, when both groups measured enough load."""
    canary = measured.canary
    if canary is None or canary.problem:
        return None
    groups = (measured, canary)
    if any(g.load is None or g.load.samples < settings.min_load_samples for g in groups):
        return None
    if measured.tpot_s is None or canary.tpot_s is None or min(measured.tpot_s, canary.tpot_s) <= 0:
        return None
    return measured.tpot_s / canary.tpot_s


def _follow_canary(
    state: ControllerState,
    canary: Canary,
    measured: ControlInput,
    settings: ControlSettings,
    replicas: int,
    now: float,
) -> _Outcome:
    """Count the canary's window, then promote it, roll it back, or go on measuring.

    The canary is taken back without a verdict when the mode stops allowing changes, the
    service drops to one replica, or its pod gave no reading within the rollout timeout.
    """
    speedup = _speedup(measured, settings)
    if speedup is not None:
        canary = replace(canary, speedups=(*canary.speedups, speedup))
    report = _report(canary, settings)
    ended = replace(state, canary=None, last_change_at=now)
    elapsed = now - canary.started_at
    stop = None
    if settings.mode is not Mode.AUTO:
        stop = f"mode {settings.mode.value} changes nothing"
    elif replicas < 2:
        stop = "the service runs one replica"
    elif not canary.speedups and elapsed > settings.rollout_timeout_s:
        # Never up is refuted as much as measured slower: not tried again at once.
        ended = replace(ended, refuted=canary)
        stop = (
            f"its pod gave no reading in {elapsed:.0f}s (limit {settings.rollout_timeout_s:.0f}s)"
        )
    elif report.verdict is CanaryVerdict.ROLLED_BACK:
        ended = replace(ended, refuted=canary)
    if stop is not None or report.verdict is CanaryVerdict.ROLLED_BACK:
        why = stop or (
            f"it did not gain {settings.min_gain:.0%} with "
            f"{settings.gain_confidence:.0%} confidence"
        )
        failed = replace(report, verdict=CanaryVerdict.ROLLED_BACK)
        return _Outcome(
            Action.ROLLBACK,
            ReasonCode.CANARY_FAILED,
            ended,
            f"canary taken back, {state.config.describe()} stays: {why}; {report.describe()}",
            canary=failed,
        )
    if report.verdict is CanaryVerdict.PROMOTED:
        promoted = replace(
            ended,
            config=canary.config,
            rollout=Rollout(target=canary.config, previous=state.last_good, started_at=now),
            changes=(*_past_hour(state, now), now),
        )
        return _Outcome(
            Action.RECONFIGURE,
            ReasonCode.CANARY_PASSED,
            promoted,
            f"reconfiguring {state.config.describe()} -> {canary.config.describe()}: "
            f"{report.describe()}, "
            + (
                f"at least {settings.min_gain:.0%} with {settings.gain_confidence:.0%} confidence"
                if report.low is not None and report.low >= settings.min_gain
                else f"{settings.min_gain:.0%} or more on average and above no gain with "
                f"{settings.gain_confidence:.0%} confidence, after its last window"
            ),
            canary=report,
        )
    counted = "" if speedup is not None else " (this window gave no comparison)"
    return _Outcome(
        Action.WITHHOLD,
        ReasonCode.CANARY_IN_PROGRESS,
        replace(state, canary=canary),
        f"holding {state.config.describe()} while the canary measures: {report.describe()}, "
        f"{settings.canary_windows} windows needed{counted}",
        canary=report,
    )


def _plan_measured(
    state: ControllerState,
    measured: ControlInput,
    service: ServiceModel,
    settings: ControlSettings,
    restart_cost: float,
    now: float,
) -> _Outcome:
    """Learn from a fresh window (step times, regime, acceptance), then judge the policy's
    choice, unless the window holds too little to choose on."""
    canary_points = measured.canary.cost_points if measured.canary is not None else ()
    evidence = state.cost_evidence.add((*measured.cost_points, *canary_points), service.cost)
    state = replace(state, cost_evidence=evidence)
    if state.canary is not None:
        return _follow_canary(state, state.canary, measured, settings, service.replicas, now)
    posterior = CostPosterior.of(service.cost, state.cost_evidence)
    cost = posterior.model()
    load = measured.load
    if load is None or load.samples < settings.min_load_samples:
        return _holding(
            state,
            ReasonCode.TOO_LITTLE_LOAD,
            f"the window has {load.samples if load else 0} busy load samples, "
            f"fewer than the {settings.min_load_samples} a decision needs",
        )
    state, regime, new_regime, window = _track(state, measured, load, cost, settings)
    if new_regime:
        state = replace(state, refuted=None)
    if regime.doubts > 0:
        unconfirmed = _holding(
            state,
            ReasonCode.REGIME_UNCONFIRMED,
            f"the load or acceptance moved away from the current regime; waiting for "
            f"{settings.regime.confirmations} windows in a row to confirm a new one",
        )
        return replace(unconfirmed, window_acceptance=window)
    acceptance = _acceptance_for_policy(state, regime, service)
    if acceptance is None:
        unknown = _holding(
            state,
            ReasonCode.ACCEPTANCE_UNKNOWN,
            f"acceptance is unknown (fewer than {settings.min_drafts} drafts measured and "
            f"no prior)",
        )
        return replace(unknown, new_regime=new_regime, window_acceptance=window)
    evaluation = _evaluate(
        state, regime, acceptance, measured, service, posterior, cost, settings, now
    )
    judged = _judge(state, evaluation, restart_cost, settings, now, service.replicas)
    return replace(judged, new_regime=new_regime, window_acceptance=window)


def _plan(
    state: ControllerState,
    measured: ControlInput,
    service: ServiceModel | None,
    settings: ControlSettings,
    restart_cost: float,
    now: float,
) -> _Outcome:
    """What this tick does: follow a rollout, hold for want of fresh measurements or of a
    cost model, or decide on the window."""
    if state.rollout is not None:
        return _follow_rollout(state, state.rollout, measured, settings, now)
    if measured.problem:
        return _holding(state, ReasonCode.METRICS_UNAVAILABLE, measured.problem)
    if service is None:
        return _holding(
            state,
            ReasonCode.NO_COST_MODEL,
            "no step-cost model (performance profile) is known for this service, so no "
            "config can be predicted: name spec.policy.performanceProfile, or set "
            "spec.engine.gpu for a model whose shape specops ships (specops.profiles "
            "data/models.toml)",
        )
    age = now - measured.window_end
    if age > settings.max_staleness_s:
        return _holding(
            state,
            ReasonCode.METRICS_STALE,
            f"the latest measurements are {age:.0f}s old (limit {settings.max_staleness_s:.0f}s)",
        )
    return _plan_measured(state, measured, service, settings, restart_cost, now)


def _decision(outcome: _Outcome, restart_cost: float, now: float) -> Decision:
    """The outcome as the decision record: what was chosen, its gain, the crossovers."""
    evaluation = outcome.evaluation
    choice = evaluation.choice if evaluation is not None else None
    return Decision(
        at=now,
        action=outcome.action,
        code=outcome.code,
        config=outcome.state.config,
        recommended=choice.config if choice else None,
        applied=outcome.action in (Action.RECONFIGURE, Action.ROLLBACK, Action.CANARY),
        reason=outcome.reason,
        predicted_gain=choice.gain_over_current if choice else None,
        gain_s=evaluation.gain_s if evaluation is not None else None,
        restart_cost_s=restart_cost,
        crossovers=choice.crossovers if choice else (),
        new_regime=outcome.new_regime,
        state=outcome.state,
        likely_gain=evaluation.likely if evaluation is not None else None,
        crossover_bands=evaluation.bands if evaluation is not None else (),
        cost_measured=outcome.state.cost_evidence.points > 0,
        prior_crossovers=evaluation.prior_crossovers if evaluation is not None else (),
        window_acceptance=outcome.window_acceptance,
        canary=outcome.canary,
        tpot_spread=choice.spread if choice else None,
    )


def decide(
    state: ControllerState,
    measured: ControlInput,
    service: ServiceModel | None,
    settings: ControlSettings,
    now: float,
) -> Decision:
    """One tick of the slow loop; ``service`` is None when no step-cost model is known."""
    restart_cost = _restart_cost(state, settings)
    outcome = _plan(state, measured, service, settings, restart_cost, now)
    return _decision(outcome, restart_cost, now)
