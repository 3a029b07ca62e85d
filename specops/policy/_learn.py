"""Step time learned from the engine's own counters, with the profile as the prior.

A line T = a + b N fitted at the k in force cannot say how step time grows with k: every
point lies on one slice of the cost surface. So the step time is a sum of structured
terms, each a physical cost with its own coefficient::

    T = fixed                                  launches, scheduler, the weights read
      + per_token      * N                     batched tokens, N = B (k + 1) + prefill
      + per_context    * C                     context tokens read by attention
      + past_knee      * max(0, N - knee)      compute past the roofline knee
      + past_2knee     * max(0, N - 2 knee)    the knee's curvature
      + per_position   * k                     the draft's sequential passes
      + per_drafted    * B k                   drafting and verifying each proposed token
      + speculating    * [k > 0]               the draft's and the sampler's fixed cost
      + table          * [a table is set]      what a per-batch-size table costs vLLM

A k = 0 row of a table still drafts (``zero_row_positions`` passes, a fact of the vLLM
release the caller passes in): its steps are priced as drafts of that length, so a table
that turns drafting "off" at high batch is weighed against speculation really off.
The coefficients have a Gaussian prior derived from the profile (its roofline: the
weights read, the FLOPs per token, the draft's cost) with wide standard deviations, and
a conjugate Gaussian posterior from measured (features, step time) points. Points at one
k still teach how cost grows with N, and N is what k multiplies, so the posterior moves
the prediction at every k; the draft's own terms move where the data can tell them apart
(off against on, a table's ranges, another k after a change) and stay at the prior where
it cannot. Everything is pure Python: the product installs no numerical library.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence, Set
from dataclasses import dataclass

from specops.policy._cost import StepCostModel, StepShape

__all__ = [
    "TERMS",
    "CostEvidence",
    "CostPosterior",
    "CostPrior",
    "LearnedCost",
    "StepPoint",
    "cost_prior",
]

TERMS = (
    "fixed",
    "per_token",
    "per_context",
    "past_knee",
    "past_2knee",
    "per_position",
    "per_drafted",
    "speculating",
    "table",
)
_DIM = len(TERMS)
# The terms the profile prices in full: the roofline's weights read, KV read and FLOPs, the
# draft's pass and its fixed cost. The rest it has no figure for (per_token, the knee's
# curvature) or only a part of: per_drafted is the head's compute per token, but drafting
# and verifying each proposed token also costs rejection sampling and the per-request
# bookkeeping of every position, host work that no datasheet gives.
_PRICED = frozenset({"fixed", "per_context", "past_knee", "per_position", "speculating"})
# The terms only a drafting step pays.
_DRAFT_TERMS = frozenset({"per_position", "per_drafted", "speculating"})
_TRIES = 64
# Fewest points of one batch that, lying together far from the prediction, overrule it.
_OVERRULE = 3
# Feature units keep the normal equations well conditioned: seconds per 1 (fixed), per
# 1000 batched tokens, per 1e6 context tokens, per draft position.
_SCALE = (1.0, 1e-3, 1e-6, 1e-3, 1e-3, 1.0, 1e-3, 1.0, 1.0)


@dataclass(frozen=True, slots=True)
class StepPoint:
    """One measured interval: the mean features of its steps and their mean time.

    ``drafted`` is the proposed tokens per step (B k summed); ``positions`` the mean draft
    length on a step, 0 for steps that did not draft; ``speculating`` the share of steps
    that drafted; ``end`` when the interval ended, so a point is counted once. ``table``:
    the steps ran under a per-batch-size table, where a decoding step that proposed
    nothing ran a k = 0 row; ``decoding`` the requests decoding per step, which such a row
    still drafts for. ``spread``: (batched tokens, share of steps) pairs of how the steps'
    sizes spread around the mean, so the knee's terms are the mean of each step's (a few
    prefill steps past the knee among short decode steps), not of the mean step's.
    """

    batched_tokens: float
    context_tokens: float
    positions: float
    drafted: float
    speculating: float
    step_seconds: float
    steps: float
    end: float
    decoding: float = 0.0
    table: bool = False
    spread: tuple[tuple[float, float], ...] = ()


def _features(
    batched: float,
    context: float,
    positions: float,
    drafted: float,
    spec: float,
    table: bool,
    knee: float,
    spread: Sequence[tuple[float, float]] = (),
) -> tuple[float, ...]:
    sizes = spread or ((batched, 1.0),)
    raw = (
        1.0,
        batched,
        context,
        sum(share * max(0.0, n - knee) for n, share in sizes),
        sum(share * max(0.0, n - 2.0 * knee) for n, share in sizes),
        positions,
        drafted,
        spec,
        1.0 if table else 0.0,
    )
    return tuple(x * s for x, s in zip(raw, _SCALE, strict=True))


def _shape_features(shape: StepShape, knee: float, zero_row: int) -> tuple[float, ...]:
    positions = shape.k if shape.k > 0 or not shape.table else zero_row
    drafting = positions > 0 and shape.batch > 0
    return _features(
        float(shape.batched_tokens),
        float(shape.context_tokens),
        float(positions) if drafting else 0.0,
        float(shape.batch * positions) if drafting else 0.0,
        1.0 if drafting else 0.0,
        shape.table,
        knee,
    )


@dataclass(frozen=True, slots=True)
class CostPrior:
    """The coefficients before any measurement (in the scaled feature units).

    ``noise`` is the relative error of one interval's mean step time that no term
    explains (step-to-step jitter over ``steps`` steps plus the model's own misfit,
    ``misfit``, which does not average away); ``outlier_ratio`` how far from the
    prediction so far a point may lie before it is taken for a broken interval;
    ``zero_row_positions`` the draft passes a k = 0 row of a table still runs.
    """

    mean: tuple[float, ...]
    stddev: tuple[float, ...]
    knee_tokens: float
    zero_row_positions: int = 0
    noise: float = 0.05
    misfit: float = 0.02
    outlier_ratio: float = 3.0


def cost_prior(
    model: StepCostModel,
    *,
    table_s: float = 0.0,
    zero_row_positions: int = 0,
    draft_pass_s: float = 0.0,
    relative_stddev: float = 0.5,
    floor_fraction: float = 0.5,
) -> CostPrior:
    """The profile's cost model as a prior over the terms, each with its uncertainty.

    ``table_s`` (what a step under a table costs besides its k) and ``zero_row_positions``
    are the release's, not the profile's: the profile is fitted without a table. The
    table term's deviation is its own mean: it is known from one published figure, and
    measured only where the service runs both with and without a table.

    ``draft_pass_s`` is one sequential pass of a draft that proposes one position a pass
    (EAGLE, MTP, a draft model; 0 for a lookup or a drafter that proposes its block at
    once): the per-position term starts there, since the profile's draft term is one cost
    a step whatever k, and a prior of 0 would make the k-th position look free until a
    change to another k measured it.

    The knee is where the profile's roofline turns compute-bound (the weights read
    equals the FLOPs at peak); without a roofline the knee is put at 256 tokens and its
    terms start at 0. A term the profile prices in full has a standard deviation of
    ``relative_stddev`` of its mean. One it has no figure for, or prices only in part (the
    cost of each drafted token), has never less than what moves a k = 3 step at batch 32
    or 256 by ``floor_fraction`` of its time, so it can still be learned. The split
    matters where one k ran: all the terms move the step together there, and a step longer
    than the prior's is put mostly on the terms it knows least. Were the weights read as
    vague as the verification's host work, the posterior would raise what speculation off
    also pays, and keep a losing k. Small values of both deviations say the profile is
    known to be right (a calibrated engine).

    The cost of each drafted token starts above the head's compute the profile gives: the
    rest of it (rejection sampling, the bookkeeping of every position) is unknown but
    never negative, a half-normal of the term's deviation, whose mean (``sqrt(2 / pi)``
    deviations) is the prior's. At the profile's figure alone, the mode the points at one
    k leave there, every k never run looks cheap: in the benchmark, with k = 3 measured at
    16 in flight on the H200 truth, k = 6 was predicted 5 % better (80 % likely), and
    served 6 % less than k = 3.
    """
    if model.peak_flops > 0 and model.flops_per_token > 0:
        per_flop_token = model.flops_per_token / model.peak_flops
        knee = max(model.t_fixed / per_flop_token, 1.0)
    else:
        per_flop_token, knee = 0.0, 256.0
    draft = model.draft
    lookup = draft.fraction_of_target * model.t_fixed
    raw_mean = (
        model.t_fixed + model.t_overhead,
        model.c_tok,
        model.c_kv + draft.c_kv,
        per_flop_token,
        0.0,
        draft_pass_s,
        draft.c_tok,
        draft.t_fixed + lookup,
        table_s,
    )
    mean = tuple(m / s for m, s in zip(raw_mean, _SCALE, strict=True))
    floors = [math.inf] * _DIM
    for batch in (32, 256):
        shape = StepShape(batch, 3, batch * 1024)
        seconds = model.step_time(shape)
        for i, x in enumerate(_shape_features(shape, knee, zero_row_positions)):
            if x > 0:
                floors[i] = min(floors[i], floor_fraction * seconds / x)
    stddev = [
        relative_stddev * m if m > 0 and term in _PRICED else max(relative_stddev * m, floor)
        for term, m, floor in zip(TERMS, mean, floors, strict=True)
    ]
    table = TERMS.index("table")
    stddev[table] = max(mean[table], 1e-6)
    drafted = TERMS.index("per_drafted")
    unpriced = stddev[drafted] * math.sqrt(2.0 / math.pi)
    mean = tuple(m + unpriced if i == drafted else m for i, m in enumerate(mean))
    return CostPrior(
        mean=mean,
        stddev=tuple(stddev),
        knee_tokens=knee,
        zero_row_positions=zero_row_positions,
    )


@dataclass(frozen=True, slots=True)
class CostEvidence:
    """Sufficient statistics of the measured points: sum of w x x' and of w x y.

    ``gram`` is the matrix of ``TERMS`` by ``TERMS``, row by row; ``until`` the end of the
    newest point counted, so a window that overlaps the last one adds only its new points;
    ``ks`` the draft lengths the points ran (0: speculation off).
    """

    gram: tuple[float, ...] = (0.0,) * (_DIM * _DIM)
    moment: tuple[float, ...] = (0.0,) * _DIM
    points: int = 0
    steps: float = 0.0
    until: float = float("-inf")
    ks: tuple[int, ...] = ()

    def times_prior(self, prior: CostPrior) -> float | None:
        """How many times the prior's step time the measured steps took: the least-squares
        factor on the prior's predictions, over the points as weighed; None without any."""
        return _fit_part(self, prior.mean)

    def add(self, points: Sequence[StepPoint], prior: CostPrior) -> CostEvidence:
        """The evidence with the points newer than ``until`` counted once.

        A point more than ``outlier_ratio`` away from what the evidence so far predicts
        is a broken interval (a counter summed across a restart, a stalled scrape) far more
        often than physics, and is left out: one such point would otherwise move every
        term at once. But when most of a batch of points lies that far, on one side, it is
        the engine that is unlike the prediction (a draft ten times slower than the
        profile's): the points are then judged against their own lower median, and the
        engine is learned, not ignored for ever.
        """
        fresh = [
            (p, _point_features(p, prior))
            for p in points
            if p.end > self.until and p.steps > 0 and p.step_seconds > 0
        ]
        if fresh:
            model = CostPosterior.of(prior, self).model()
            ratios = [p.step_seconds / model.seconds(x) for p, x in fresh]
            typical = statistics.median_low(ratios) if len(fresh) >= _OVERRULE else 1.0
            if _plausible(typical, prior):
                typical = 1.0
            fresh = [
                point
                for point, ratio in zip(fresh, ratios, strict=True)
                if _plausible(ratio / typical, prior)
            ]
        if not fresh:
            return self
        gram = list(self.gram)
        moment = list(self.moment)
        for p, x in fresh:
            relative = prior.noise**2 / p.steps + prior.misfit**2
            w = 1.0 / (relative * p.step_seconds**2)
            for i in range(_DIM):
                moment[i] += w * x[i] * p.step_seconds
                for j in range(_DIM):
                    gram[i * _DIM + j] += w * x[i] * x[j]
        ks = {*self.ks, *(k for p, _ in fresh if (k := _k_ran(p)) is not None)}
        return CostEvidence(
            gram=tuple(gram),
            moment=tuple(moment),
            points=self.points + len(fresh),
            steps=self.steps + sum(p.steps for p, _ in fresh),
            until=max(p.end for p, _ in fresh),
            ks=tuple(sorted(ks)),
        )


def _fit_part(
    evidence: CostEvidence, part: Sequence[float], rest: Sequence[float] | None = None
) -> float | None:
    """The factor on the prediction of the coefficients ``part`` that fits the points best,
    with those of ``rest`` (None: none) predicting the remainder as they are."""
    gram, moment = evidence.gram, evidence.moment

    def product(a: Sequence[float], b: Sequence[float]) -> float:
        return sum(a[i] * gram[i * _DIM + j] * b[j] for i in range(_DIM) for j in range(_DIM))

    scale = product(part, part)
    if evidence.points == 0 or scale <= 0:
        return None
    explained = sum(c * m for c, m in zip(part, moment, strict=True))
    if rest is not None:
        explained -= product(rest, part)
    return explained / scale


def _k_ran(point: StepPoint) -> int | None:
    """The draft length a point's steps ran: 0 for speculation off, None for a table's
    k = 0 rows, which still draft and so are not a measurement of off."""
    if point.speculating:
        return round(point.positions / point.speculating)
    return None if point.table else 0


def _point_features(point: StepPoint, prior: CostPrior) -> tuple[float, ...]:
    """The point's features; under a table, the decoding steps that proposed nothing ran a
    k = 0 row, which still drafted ``zero_row_positions`` for every decoding request."""
    zero_rows = (1.0 - point.speculating) if point.table and point.decoding > 0 else 0.0
    extra = zero_rows * prior.zero_row_positions
    return _features(
        point.batched_tokens,
        point.context_tokens,
        point.positions + extra,
        point.drafted + extra * point.decoding,
        point.speculating + (zero_rows if extra > 0 else 0.0),
        point.table,
        prior.knee_tokens,
        point.spread,
    )


def _plausible(ratio: float, prior: CostPrior) -> bool:
    """Whether a measured step time ``ratio`` times the predicted one can be physics."""
    return 1.0 / prior.outlier_ratio <= ratio <= prior.outlier_ratio


def _cholesky(matrix: Sequence[float]) -> list[float]:
    lower = [0.0] * (_DIM * _DIM)
    for i in range(_DIM):
        for j in range(i + 1):
            total = matrix[i * _DIM + j] - sum(
                lower[i * _DIM + m] * lower[j * _DIM + m] for m in range(j)
            )
            if i == j:
                lower[i * _DIM + i] = math.sqrt(max(total, 1e-300))
            else:
                lower[i * _DIM + j] = total / lower[j * _DIM + j]
    return lower


def _solve(lower: Sequence[float], rhs: Sequence[float]) -> list[float]:
    """x with (L L') x = rhs."""
    y = [0.0] * _DIM
    for i in range(_DIM):
        y[i] = (rhs[i] - sum(lower[i * _DIM + m] * y[m] for m in range(i))) / lower[i * _DIM + i]
    x = [0.0] * _DIM
    for i in reversed(range(_DIM)):
        x[i] = (y[i] - sum(lower[m * _DIM + i] * x[m] for m in range(i + 1, _DIM))) / lower[
            i * _DIM + i
        ]
    return x


def _pinned(matrix: Sequence[float], pinned: Set[int]) -> list[float]:
    """The precision with the pinned coefficients cut loose (held at 0, unit diagonal)."""
    out = list(matrix)
    for i in pinned:
        for j in range(_DIM):
            out[i * _DIM + j] = out[j * _DIM + i] = 0.0
        out[i * _DIM + i] = 1.0
    return out


def _nonnegative_mode(
    precision: Sequence[float], rhs: Sequence[float]
) -> tuple[tuple[float, ...], frozenset[int]]:
    """The posterior's mode with every coefficient >= 0 (each term is a cost), and the
    coefficients the constraint holds at 0.

    Unconstrained, a few collinear points (one k, a narrow range of batches) can trade a
    negative term against a large one and predict absurd step times away from the data.
    Active set: solve, pin the most negative coefficient at 0, solve the rest again.
    """
    pinned: set[int] = set()
    while True:
        vector = [0.0 if i in pinned else v for i, v in enumerate(rhs)]
        solution = _solve(_cholesky(_pinned(precision, pinned)), vector)
        negative = [i for i in range(_DIM) if solution[i] < 0 and i not in pinned]
        if not negative:
            return tuple(max(v, 0.0) for v in solution), frozenset(pinned)
        pinned.add(min(negative, key=lambda i: solution[i]))


@dataclass(frozen=True, slots=True)
class LearnedCost:
    """Step time from one set of coefficients; a StepCostModel's stand-in for the policy."""

    coefficients: tuple[float, ...]
    knee_tokens: float
    floor_s: float
    zero_row_positions: int = 0

    def seconds(self, features: Sequence[float]) -> float:
        """The step time of a step with these (scaled) features, never below the floor."""
        seconds = sum(c * v for c, v in zip(self.coefficients, features, strict=True))
        return max(seconds, self.floor_s)

    def features(self, shape: StepShape) -> tuple[float, ...]:
        """The (scaled) features ``seconds`` prices for ``shape``."""
        return _shape_features(shape, self.knee_tokens, self.zero_row_positions)

    def step_time(self, shape: StepShape) -> float:
        """``seconds`` of the shape's features, inlined: the policy prices millions of
        steps a decision, and the same products summed in the same order give the same
        float."""
        c, s, knee = self.coefficients, _SCALE, self.knee_tokens
        positions = shape.k if shape.k > 0 or not shape.table else self.zero_row_positions
        drafting = positions > 0 and shape.batch > 0
        batched = float(shape.batched_tokens)
        seconds = (
            c[0] * s[0]
            + c[1] * (batched * s[1])
            + c[2] * (float(shape.context_tokens) * s[2])
            + c[3] * (max(0.0, batched - knee) * s[3])
            + c[4] * (max(0.0, batched - 2.0 * knee) * s[4])
            + c[5] * ((float(positions) if drafting else 0.0) * s[5])
            + c[6] * ((float(shape.batch * positions) if drafting else 0.0) * s[6])
            + c[7] * ((1.0 if drafting else 0.0) * s[7])
            + c[8] * ((1.0 if shape.table else 0.0) * s[8])
        )
        return max(seconds, self.floor_s)


@dataclass(frozen=True, slots=True)
class CostPosterior:
    """The coefficients' posterior: its mode (every term >= 0) and draws from it.

    Draws come from the Gaussian around the mode with the terms the constraint holds at
    0 kept there (the posterior of the others given them), each clipped at 0.
    """

    prior: CostPrior
    evidence: CostEvidence
    mean: tuple[float, ...]
    _lower: tuple[float, ...]
    _pinned: frozenset[int] = frozenset()

    @classmethod
    def of(cls, prior: CostPrior, evidence: CostEvidence) -> CostPosterior:
        precision = list(evidence.gram)
        rhs = list(evidence.moment)
        for i in range(_DIM):
            p = 1.0 / prior.stddev[i] ** 2
            precision[i * _DIM + i] += p
            rhs[i] += p * prior.mean[i]
        mode, pinned = _nonnegative_mode(precision, rhs)
        return cls(prior, evidence, mode, tuple(_cholesky(_pinned(precision, pinned))), pinned)

    @property
    def measured(self) -> bool:
        return self.evidence.points > 0

    def _model(self, coefficients: Sequence[float]) -> LearnedCost:
        floor = 0.2 * self.prior.mean[0] * _SCALE[0]
        return LearnedCost(
            tuple(coefficients),
            self.prior.knee_tokens,
            max(floor, 1e-5),
            self.prior.zero_row_positions,
        )

    def model(self) -> LearnedCost:
        return self._model(self.mean)

    def stddev(self, shape: StepShape) -> float:
        """Posterior standard deviation of the step time of ``shape``."""
        x = [
            0.0 if i in self._pinned else v
            for i, v in enumerate(
                _shape_features(shape, self.prior.knee_tokens, self.prior.zero_row_positions)
            )
        ]
        # Var = x' P^-1 x = |L^-1 x|^2
        y = [0.0] * _DIM
        lower = self._lower
        for i in range(_DIM):
            y[i] = (x[i] - sum(lower[i * _DIM + m] * y[m] for m in range(i))) / lower[i * _DIM + i]
        return math.sqrt(sum(v * v for v in y))

    def _draw(self, rng: random.Random) -> list[float]:
        z = [rng.gauss(0.0, 1.0) for _ in range(_DIM)]
        # theta = mode + L'^-1 z has covariance (L L')^-1
        lower = self._lower
        d = [0.0] * _DIM
        for i in reversed(range(_DIM)):
            d[i] = (z[i] - sum(lower[m * _DIM + i] * d[m] for m in range(i + 1, _DIM))) / lower[
                i * _DIM + i
            ]
        return [
            0.0 if i in self._pinned else m + v
            for i, (m, v) in enumerate(zip(self.mean, d, strict=True))
        ]

    def draft_excess(self) -> LearnedCost | None:
        """The prior with all the measured steps took beyond it put on the draft's own
        terms (its passes, its drafted tokens, its fixed cost), the target's kept at the
        prior's; None where that leaves the draft no dearer than the prior has it.

        Where every point ran one k, nothing the points show tells the two apart; this is
        the split's other end from the posterior's, which puts most of the excess on the
        terms the prior knows least.
        """
        mean = self.prior.mean
        draft = [m if TERMS[i] in _DRAFT_TERMS else 0.0 for i, m in enumerate(mean)]
        target = [0.0 if TERMS[i] in _DRAFT_TERMS else m for i, m in enumerate(mean)]
        factor = _fit_part(self.evidence, draft, target)
        if factor is None or factor <= 1.0:
            return None
        return self._model([t + factor * d for t, d in zip(target, draft, strict=True)])

    def draws(self, count: int, seed: int = 0) -> tuple[LearnedCost, ...]:
        """``count`` coefficient sets from the posterior (seeded, so decisions repeat).

        A draw with a negative term is drawn again (the posterior is truncated at 0), up to
        ``_TRIES`` times, and is the mode when none of those is valid: clipping would bias
        every draw upwards, along the directions the data cannot see.
        """
        rng = random.Random(seed)
        out: list[LearnedCost] = []
        for _ in range(count):
            drawn = next(
                (d for d in (self._draw(rng) for _ in range(_TRIES)) if min(d) >= 0),
                list(self.mean),
            )
            out.append(self._model(drawn))
        return tuple(out)
