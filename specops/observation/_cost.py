"""Step cost measured from vLLM's counters, and an online fit of the step-time model.

vLLM's ``iteration_tokens_total`` histogram counts steps (its count) and the tokens each
step *emitted* (its sum: prompt plus generated). A verifying step processes every draft
token, accepted or not, so the batched tokens N of the cost model are the emitted
tokens plus the draft tokens minus the accepted ones. The engine loops without pause
while it has running requests, so over an interval busy at both ends the wall time per
step (times the number of engines sharing the counters) is the step time, unless the engine
idled in between: its requests' gaps between tokens (the ITL histogram), which idle time
never enters, then bound it.

The fit is Bayesian linear regression of step time on N, T = a + b N, over the window's
(N, T) points. Its prior is the profile's cost model linearised at the configured k, so
with no data it is the profile, and a direction the data cannot see (all points at one
N say nothing of the slope) stays at the prior. Each point averages ``steps`` steps, so
it weighs ``steps`` times one step's noise.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from specops.observation._names import Counter, Gauge, Hist
from specops.observation._snapshot import Histogram, Interval
from specops.policy import StepCostModel, StepShape

__all__ = [
    "CostPoint",
    "StepTimeFit",
    "StepTimePrior",
    "adjusted_cost_model",
    "cost_point",
    "fit_step_time",
    "prior_from_model",
    "token_spread",
]


@dataclass(frozen=True, slots=True)
class CostPoint:
    """Mean batched tokens per step and mean seconds per step over ``steps`` steps.

    The rest says what else the steps did, for a model with more terms than N:
    ``batch`` the mean running requests per engine, ``drafted`` the draft tokens proposed
    per step, ``drafts`` the drafts (one per decoding request that drafted) per step,
    ``decoding`` the requests that decoded per step (each emits one token besides the
    drafts it had accepted, so generated minus accepted tokens, less the first tokens,
    which prefills emit; running requests also count those still prefilling), ``end``
    when the interval ended. ``spread`` is how the batched tokens spread over the steps,
    as (tokens, share of steps) pairs from the histogram's buckets: a few prefill steps
    among many short decode steps cost more than steps of the mean size would, where
    compute binds.
    """

    batched_tokens: float
    step_seconds: float
    steps: float
    batch: float = 0.0
    drafted: float = 0.0
    drafts: float = 0.0
    decoding: float = 0.0
    end: float = 0.0
    spread: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True, slots=True)
class StepTimePrior:
    """T = a + b N before any data: means, standard deviations, and one step's noise."""

    intercept_s: float
    slope_s: float
    intercept_stddev_s: float
    slope_stddev_s: float
    noise_stddev_s: float


@dataclass(frozen=True, slots=True)
class StepTimeFit:
    """The posterior of T = a + b N: means, standard deviations, their correlation."""

    intercept_s: float
    slope_s: float
    intercept_stddev_s: float
    slope_stddev_s: float
    correlation: float
    points: int
    steps: float

    def seconds(self, batched_tokens: float) -> float:
        return self.intercept_s + self.slope_s * batched_tokens


# How far the wall time per step may exceed the requests' mean gap between tokens before the
# interval counts as having idled. Busy throughout, the two differ a little (the mean gap
# weighs each step by its requests, and steps straddle the readings): on the decision
# benchmark's day trace the wall time per step was within 1.8 % of the mean gap on 99 % of
# 2 609 busy intervals.
_IDLE_TOLERANCE = 1.1


def _step_seconds(interval: Interval, steps: float) -> float:
    """Seconds per step: the wall time's share, or the requests' mean gap between tokens
    where the engine idled between two readings that found it busy (every request done, new
    ones arrived), which would read as a cost every step pays and hide every crossover."""
    wall = interval.seconds * interval.engines / steps
    gaps = interval.histograms.get(Hist.ITL)
    if gaps is None or gaps.count <= 0:
        return wall
    between = gaps.total / gaps.count
    return between if wall > between * _IDLE_TOLERANCE else wall


def cost_point(interval: Interval) -> CostPoint | None:
    """The (N, T) point of one interval; None across a restart, idle time or missing series."""
    if interval.reset or interval.seconds <= 0:
        return None
    running_start = interval.gauges_at_start.get(Gauge.RUNNING, 0.0)
    running_end = interval.gauges_at_end.get(Gauge.RUNNING, 0.0)
    iteration = interval.histograms.get(Hist.ITERATION_TOKENS)
    if running_start <= 0 or running_end <= 0 or iteration is None or iteration.count <= 0:
        return None
    drafted = interval.counters.get(Counter.DRAFT_TOKENS, 0.0)
    accepted = interval.counters.get(Counter.ACCEPTED_TOKENS, 0.0)
    verified = drafted - accepted
    generated = interval.counters.get(Counter.GENERATION_TOKENS, 0.0)
    first = interval.histograms.get(Hist.TTFT)
    # A prefill's first token counts as generated but is no decoding step: left in, the
    # drafting share would dip whenever requests arrive, as the prefill steps slow down,
    # and the posterior would read that noise as what drafting costs.
    decoded = generated - accepted - (first.count if first is not None else 0.0)
    steps = iteration.count
    batched = (iteration.total + verified) / steps
    return CostPoint(
        batched_tokens=batched,
        step_seconds=_step_seconds(interval, steps),
        steps=steps,
        batch=(running_start + running_end) / 2 / interval.engines,
        drafted=drafted / steps,
        drafts=interval.counters.get(Counter.DRAFTS, 0.0) / steps,
        decoding=max(decoded, 0.0) / steps,
        end=interval.end,
        spread=token_spread(iteration, batched),
    )


def token_spread(iteration: Histogram, mean_tokens: float) -> tuple[tuple[float, float], ...]:
    """(tokens, share of steps) per non-empty bucket of the tokens-per-step histogram.

    Each bucket stands at its middle (the +Inf bucket at twice its lower bound), and every
    value is scaled so the spread's mean is ``mean_tokens``: the histogram counts the
    emitted tokens, the steps also verified the rejected drafts.
    """
    lower = 0.0
    pairs: list[tuple[float, float]] = []
    previous = 0.0
    for bound, cumulative in zip(iteration.bounds, iteration.cumulative, strict=True):
        count = cumulative - previous
        previous = cumulative
        upper = bound if math.isfinite(bound) else 2.0 * max(lower, 1.0)
        if count > 0:
            pairs.append(((lower + upper) / 2.0, count / iteration.count))
        lower = bound
    middle = sum(t * share for t, share in pairs)
    if not pairs or middle <= 0:
        return ()
    scale = mean_tokens / middle
    return tuple((t * scale, share) for t, share in pairs)


def prior_from_model(
    model: StepCostModel,
    k: int,
    context_tokens_per_request: float,
    *,
    relative_stddev: float = 0.5,
    noise_fraction: float = 0.1,
    batches: tuple[int, int] = (1, 64),
) -> StepTimePrior:
    """Linearise ``model`` at ``k`` in N through two batch sizes (a secant, exact if additive).

    The standard deviations are ``relative_stddev`` of the step time at the larger batch
    (over its N for the slope), so a zero coefficient still gets a finite prior.
    """
    small, large = batches

    def at(batch: int) -> tuple[float, float]:
        shape = StepShape(batch, k, round(batch * context_tokens_per_request))
        return float(shape.batched_tokens), model.step_time(shape)

    n1, t1 = at(small)
    n2, t2 = at(large)
    slope = (t2 - t1) / (n2 - n1)
    return StepTimePrior(
        intercept_s=t1 - slope * n1,
        slope_s=slope,
        intercept_stddev_s=relative_stddev * t2,
        slope_stddev_s=relative_stddev * t2 / n2,
        noise_stddev_s=noise_fraction * t1,
    )


def fit_step_time(points: Sequence[CostPoint], prior: StepTimePrior) -> StepTimeFit:
    """Posterior of (a, b) given the points (conjugate normal, known noise)."""
    noise = prior.noise_stddev_s**2
    # Precision matrix [[paa, pab], [pab, pbb]] and precision-weighted mean (ha, hb).
    paa = 1.0 / prior.intercept_stddev_s**2
    pbb = 1.0 / prior.slope_stddev_s**2
    pab = 0.0
    ha = paa * prior.intercept_s
    hb = pbb * prior.slope_s
    for p in points:
        w = p.steps / noise
        paa += w
        pab += w * p.batched_tokens
        pbb += w * p.batched_tokens**2
        ha += w * p.step_seconds
        hb += w * p.batched_tokens * p.step_seconds
    det = paa * pbb - pab * pab
    var_a, var_b, cov = pbb / det, paa / det, -pab / det
    return StepTimeFit(
        intercept_s=var_a * ha + cov * hb,
        slope_s=cov * ha + var_b * hb,
        intercept_stddev_s=math.sqrt(var_a),
        slope_stddev_s=math.sqrt(var_b),
        correlation=cov / math.sqrt(var_a * var_b),
        points=len(points),
        steps=sum(p.steps for p in points),
    )


def adjusted_cost_model(
    model: StepCostModel, prior: StepTimePrior, fit: StepTimeFit
) -> StepCostModel:
    """The profile's model moved by what the data said at the configured k.

    The prior is the model's line at that k, so moving ``t_fixed`` and ``c_tok`` by the
    fit's change of intercept and slope makes the model reproduce the fitted line there,
    and carries the same correction to every other k.

    The posterior is Gaussian with no sign constraint, so a few points far below the prior
    (an engine that just started, a busy host) can ask for a negative term; a step cannot
    take negative time, so each term stops at 0 rather than turn throughput negative.
    """
    return dataclasses.replace(
        model,
        t_fixed=max(model.t_fixed + fit.intercept_s - prior.intercept_s, 0.0),
        c_tok=max(model.c_tok + fit.slope_s - prior.slope_s, 0.0),
    )
