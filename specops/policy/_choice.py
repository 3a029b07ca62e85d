"""Choosing the speculative config that serves a measured load best.

For every candidate k and batch size B the model predicts one step's time T from the
step-cost model and the tokens it emits E(k) from the acceptance curve, so
TPOT(k, B) = T / E(k) and throughput(k, B) = B * E(k) / T. At a fixed B the three
objectives agree (throughput is B / TPOT, and the lowest TPOT is the one most likely
to meet a target), so a per-batch-size table is simply the best k at every B. They
differ once one config must serve a whole distribution of B, which is where the
expected value over the measured batch-size distribution decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache

from specops.policy._acceptance import AcceptanceCurve
from specops.policy._config import ScheduleRange, SpecConfig
from specops.policy._cost import StepShape, StepTime
from specops.policy._load import BatchDistribution
from specops.policy._prompts import Prompts
from specops.policy._spread import TpotSpread, share_within

__all__ = [
    "Crossover",
    "Objective",
    "ObjectiveKind",
    "PointEstimate",
    "PolicyChoice",
    "PolicyInput",
    "Prediction",
    "SpeedModel",
    "best_k_by_batch",
    "choose",
    "crossovers",
    "merge_ranges",
    "predict",
    "relative_gain",
    "speed_model",
]


class ObjectiveKind(StrEnum):
    THROUGHPUT = "Throughput"
    LATENCY = "Latency"
    GOODPUT = "Goodput"


@dataclass(frozen=True)
class Objective:
    """What "best" means: most tokens/s, lowest mean TPOT, or most tokens/s within a TPOT target."""

    kind: ObjectiveKind = ObjectiveKind.THROUGHPUT
    tpot_target_s: float | None = None

    def __post_init__(self) -> None:
        if self.kind is ObjectiveKind.GOODPUT and (
            self.tpot_target_s is None or self.tpot_target_s <= 0
        ):
            raise ValueError("a Goodput objective needs tpot_target_s > 0")


Steps = tuple[tuple[StepShape, float], ...]
"""The steps a point's time is the mean of, each shape with its share of them."""


@dataclass(frozen=True)
class PointEstimate:
    """One step at batch ``batch`` with ``k`` drafts: its time and expected emitted tokens."""

    batch: int
    k: int
    step_s: float
    tokens_per_step: float

    @property
    def tpot_s(self) -> float:
        return self.step_s / self.tokens_per_step

    @property
    def throughput(self) -> float:
        return self.batch * self.tokens_per_step / self.step_s


@dataclass(frozen=True)
class SpeedModel:
    """Step cost plus acceptance at a context length: everything needed to predict a step.

    ``prompts`` are the prompt tokens the steps also compute (chunked prefill): a step
    that emits ``B E(k)`` tokens takes ``B E(k)`` times their rate per output token, so at
    high load they are as many as the decode tokens, and a k that emits more per step
    brings more prefill into each step too. A step's time is its mean over how many whole
    prompts the steps take (:class:`Prompts`), not the time of the mean step.
    """

    cost: StepTime
    acceptance: AcceptanceCurve
    context_tokens: float
    prompts: Prompts = field(default_factory=Prompts)
    spread: TpotSpread = field(default_factory=TpotSpread)
    _memo: dict[tuple[int, int, bool], PointEstimate] = field(
        default_factory=dict, compare=False, repr=False
    )
    _sigmas: dict[int, float] = field(default_factory=dict, compare=False, repr=False)
    _tokens: dict[int, float] = field(default_factory=dict, compare=False, repr=False)

    def within(self, point: PointEstimate, target_s: float) -> float:
        """The share of requests whose own TPOT meets ``target_s`` at ``point``."""
        sigma = self._sigmas.get(point.k)
        if sigma is None:
            sigma = self._sigmas[point.k] = self.spread.sigma(self.acceptance, point.k)
        return share_within(point.tpot_s, target_s, sigma)

    def tokens(self, k: int) -> float:
        """E(k): the tokens a step with ``k`` drafts emits per request."""
        tokens = self._tokens.get(k)
        if tokens is None:
            tokens = self._tokens[k] = self.acceptance.expected_tokens(k)
        return tokens

    def shapes(self, batch: int, k: int, table: bool = False) -> Steps:
        """The steps a point's time is the mean of: (shape, share) by the prompts they take."""
        context = round(batch * self.context_tokens)
        return tuple(
            (StepShape(batch, k, context, prefill, table), share)
            for prefill, share in self.prompts.per_step(batch * self.tokens(k))
        )

    def point(self, batch: int, k: int, table: bool = False) -> PointEstimate:
        """One step at ``batch`` with ``k`` drafts, under a per-batch-size table or not."""
        key = (batch, k, table)
        found = self._memo.get(key)
        if found is None:
            step_s = sum(
                share * self.cost.step_time(shape) for shape, share in self.shapes(batch, k, table)
            )
            found = PointEstimate(batch, k, step_s, self.tokens(k))
            self._memo[key] = found
        return found


@lru_cache(maxsize=2)
def speed_model(
    cost: StepTime,
    acceptance: AcceptanceCurve,
    context_tokens: float,
    prompts: Prompts,
    spread: TpotSpread,
) -> SpeedModel:
    """The one speed model of these inputs, and the points it has priced so far.

    A decision looks at its regime's load, each past load of the mixture and the mixture
    itself through the same cost and acceptance; the crossovers and the best k by batch
    size it finds for each are the same scan of every batch size. Sharing one model shares
    what that scan priced (its values are those of a fresh model).
    """
    return SpeedModel(cost, acceptance, context_tokens, prompts, spread)


@dataclass(frozen=True)
class Crossover:
    """The smallest batch at which k drafts stop paying: TPOT(k, B) >= TPOT(0, B).

    ``batch`` is None when k still beats no speculation at every batch up to the limit.
    """

    k: int
    batch: int | None

    def describe(self) -> str:
        return f"k={self.k} at batch {self.batch}" if self.batch else f"k={self.k} never"


def crossovers(model: SpeedModel, ks: Sequence[int], max_batch: int) -> tuple[Crossover, ...]:
    out: list[Crossover] = []
    for k in ks:
        found = next(
            (
                b
                for b in range(1, max_batch + 1)
                if model.point(b, k).tpot_s >= model.point(b, 0).tpot_s
            ),
            None,
        )
        out.append(Crossover(k, found))
    return tuple(out)


def best_k_by_batch(
    model: SpeedModel, ks: Sequence[int], max_batch: int, tolerance: float = 0.005
) -> tuple[int, ...]:
    """Best k for each batch 1..max_batch under a table; within ``tolerance`` of the best,
    the smallest k.

    Preferring the shorter k on a near-tie drafts less for the same speed and keeps the
    table to fewer ranges.
    """
    ordered = sorted(ks)
    best: list[int] = []
    for b in range(1, max_batch + 1):
        speeds = {k: model.point(b, k, table=True).throughput for k in ordered}
        top = max(speeds.values())
        best.append(next(k for k in ordered if speeds[k] >= top * (1 - tolerance)))
    return tuple(best)


def merge_ranges(best_by_batch: Sequence[int]) -> tuple[ScheduleRange, ...]:
    """``best_by_batch[i]`` is the k for batch i + 1; runs of equal k become one range."""
    ranges: list[ScheduleRange] = []
    start = 1
    for i in range(1, len(best_by_batch) + 1):
        if i == len(best_by_batch) or best_by_batch[i] != best_by_batch[start - 1]:
            ranges.append(ScheduleRange(start, i, best_by_batch[start - 1]))
            start = i + 1
    return tuple(ranges)


@dataclass(frozen=True)
class Prediction:
    """Expected figures of one config over the batch-size distribution.

    ``mean_tpot_s`` weighs each batch size by time; ``goodput`` counts the tokens of the
    share of requests whose own TPOT meets the target at each batch size (all of them when
    there is none); ``value`` is the objective, higher is better.
    """

    config: SpecConfig
    throughput: float
    mean_tpot_s: float
    goodput: float
    value: float


# Below this share of its tokens within the TPOT target a config's goodput is the far tail
# of the requests' spread, where the prediction is no better than the share itself: on the
# benchmark's H100 truth near 250 in flight the model put k=1 and k=2 at 7 % and 10 % of their
# tokens where the engine gave 4 % and 3 % at 256, and one window's swing between two such tails
# restarted the pods into the config that delivered less. A change between them is no gain
# to the requests that miss the target either way. Such goodput counts as none, and
# throughput decides, as it does where no config meets the target at all.
_RESOLVED_SHARE = 0.10


def predict(
    config: SpecConfig, load: BatchDistribution, model: SpeedModel, objective: Objective
) -> Prediction:
    throughput = tpot = goodput = 0.0
    target = objective.tpot_target_s
    table = bool(config.per_batch_size)
    for batch, weight in load.weights:
        point = model.point(batch, config.k_for_batch(batch), table)
        throughput += weight * point.throughput
        tpot += weight * point.tpot_s
        share = 1.0 if target is None else model.within(point, target)
        goodput += weight * point.throughput * share
    value = {
        ObjectiveKind.THROUGHPUT: throughput,
        ObjectiveKind.LATENCY: 1.0 / tpot,
        ObjectiveKind.GOODPUT: goodput if goodput >= _RESOLVED_SHARE * throughput else 0.0,
    }[objective.kind]
    return Prediction(config, throughput, tpot, goodput, value)


def relative_gain(new: Prediction, old: Prediction) -> float:
    """How much better ``new`` is than ``old`` on the objective, as a fraction.

    When ``old`` meets no part of a goodput target, or only its far tail, its value is 0:
    the goodput ``new`` adds is then measured against all the tokens ``old`` delivers, and
    with no goodput on either side raw throughput decides, so the fraction stays finite.
    """
    if old.value > 0:
        return new.value / old.value - 1.0
    if new.value > 0:
        return new.value / old.throughput
    return new.throughput / old.throughput - 1.0


@dataclass(frozen=True)
class PolicyInput:
    """Everything the policy looks at; ``drafts_seen`` = 0 marks ``acceptance`` as a prior.

    ``per_batch_size``: a per-batch-size table may be chosen (vLLM honours one for the
    method and parallelism, and the user did not turn it off); ``one_k_reason`` says
    why not, in words, when it may not.
    """

    acceptance: AcceptanceCurve
    drafts_seen: int
    load: BatchDistribution
    cost: StepTime
    context_tokens: float
    current: SpecConfig
    objective: Objective = Objective()
    prompts: Prompts = field(default_factory=Prompts)
    spread: TpotSpread = field(default_factory=TpotSpread)
    k_min: int = 1
    k_max: int = 7
    max_batch: int = 256
    confidence_z: float = 1.0
    min_gain: float = 0.01
    per_batch_size: bool = True
    one_k_reason: str = "the per-batch-size table is turned off"

    def __post_init__(self) -> None:
        if not 1 <= self.k_min <= self.k_max:
            raise ValueError(
                f"k bounds must satisfy 1 <= min <= max, got {self.k_min}, {self.k_max}"
            )
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        if self.context_tokens < 0:
            raise ValueError(f"context_tokens must be >= 0, got {self.context_tokens}")

    @property
    def candidate_ks(self) -> tuple[int, ...]:
        return tuple(range(self.k_min, self.k_max + 1))


@dataclass(frozen=True)
class PolicyChoice:
    """The chosen config with its prediction; ``acceptance`` is the curve it predicted with
    (the measured one's lower bound) and ``spread`` the requests' TPOT spread, so a caller
    can re-predict under other step costs."""

    config: SpecConfig
    predicted: Prediction
    current: Prediction
    baseline: Prediction
    candidates: tuple[Prediction, ...]
    crossovers: tuple[Crossover, ...]
    schedule: bool
    reason: str
    acceptance: AcceptanceCurve
    spread: TpotSpread = field(default_factory=TpotSpread)

    @property
    def gain_over_current(self) -> float:
        return relative_gain(self.predicted, self.current)

    @property
    def gain_over_off(self) -> float:
        return relative_gain(self.predicted, self.baseline)


def _score(p: Prediction) -> tuple[float, float]:
    return (p.value, p.throughput)


def _objective_words(objective: Objective) -> str:
    if objective.kind is ObjectiveKind.LATENCY:
        return "mean TPOT"
    if objective.kind is ObjectiveKind.GOODPUT:
        return f"goodput within a {(objective.tpot_target_s or 0.0) * 1e3:.0f} ms TPOT target"
    return "throughput"


def choose(inputs: PolicyInput) -> PolicyChoice:
    """The config that maximises the objective over the measured load, and why."""
    curve = (
        inputs.acceptance.lower_bound(inputs.drafts_seen, inputs.confidence_z)
        if inputs.drafts_seen > 0
        else inputs.acceptance
    )
    model = speed_model(inputs.cost, curve, inputs.context_tokens, inputs.prompts, inputs.spread)
    ks = inputs.candidate_ks
    cross = crossovers(model, ks, inputs.max_batch)
    off = predict(SpecConfig.off(), inputs.load, model, inputs.objective)
    current = predict(inputs.current, inputs.load, model, inputs.objective)
    schedule = inputs.per_batch_size

    # Every single k, and where vLLM takes one the best table: a table costs vLLM more
    # than its k (the cost model prices that), so it must beat one k, not only off.
    configs = [SpecConfig.static(k) for k in ks]
    if schedule:
        ranges = merge_ranges(best_k_by_batch(model, (0, *ks), inputs.max_batch))
        if len(ranges) > 1:
            configs.append(SpecConfig(max(r.k for r in ranges), ranges))
    candidates = (off, *(predict(c, inputs.load, model, inputs.objective) for c in configs))
    best = off
    for candidate in candidates[1:]:
        if _score(candidate) > _score(best):
            best = candidate

    load_words = inputs.load.describe()
    cross_words = ", ".join(c.describe() for c in cross)
    goal = _objective_words(inputs.objective)
    if inputs.objective.kind is ObjectiveKind.GOODPUT and best.value == 0 and off.value == 0:
        # every config's goodput counts as none: the gains below are throughput's
        goal = (
            f"throughput (no config is predicted to meet the target for "
            f"{_RESOLVED_SHARE:.0%} of its tokens)"
        )
    gain = relative_gain(best, off)
    if best.config.is_off or gain < inputs.min_gain:
        smallest = inputs.load.weights[0][0]
        if all(c.batch is not None and smallest >= c.batch for c in cross):
            why = f"the load (never below batch {smallest}) stays above every crossover"
        else:
            why = (
                f"no speculative config beats no speculation on {goal} by the "
                f"{inputs.min_gain:.0%} that keeping a draft model needs (best {gain:+.1%})"
            )
        reason = (
            f"speculation off: at the observed load ({load_words}) {why}; crossovers "
            f"{cross_words}. Off also frees the draft model's memory for KV cache."
        )
        best = off
    elif best.config.per_batch_size:
        reason = (
            f"per-batch-size table {best.config.describe()}: the best k at each batch size, "
            f"capped by num_speculative_tokens; crossovers {cross_words}. At the observed load "
            f"({load_words}) it predicts {gain:+.1%} {goal} over no speculation."
        )
    else:
        runner_up = max(
            (c for c in candidates if c.config != best.config and not c.config.is_off),
            key=_score,
            default=None,
        )
        runner_words = (
            f"; next best {runner_up.config.describe()} at {relative_gain(runner_up, off):+.1%}"
            if runner_up is not None
            else ""
        )
        why_one = (
            "no table it could run beats it by what a table costs"
            if schedule
            else inputs.one_k_reason
        )
        reason = (
            f"one k, {best.config.describe()} ({why_one}): at the observed load "
            f"({load_words}) it predicts {gain:+.1%} {goal} over no speculation{runner_words}; "
            f"crossovers {cross_words}."
        )
    if inputs.objective.kind is ObjectiveKind.GOODPUT:
        reason = f"{reason} Each request counts by its own TPOT: {inputs.spread.describe()}."
    return PolicyChoice(
        config=best.config,
        predicted=best,
        current=current,
        baseline=off,
        candidates=candidates,
        crossovers=cross,
        schedule=schedule,
        reason=reason,
        acceptance=curve,
        spread=inputs.spread,
    )
