"""Step-time points from counters, and the Bayesian fit against a known linear truth."""

import random
from collections.abc import Sequence

import pytest

from specops.observation import (
    CostPoint,
    StepTimePrior,
    adjusted_cost_model,
    cost_point,
    fit_step_time,
    interval_between,
    parse_exposition,
    prior_from_model,
    snapshot_from_reading,
)
from specops.policy import DraftCost, StepCostModel, StepShape

from .fake_vllm import FakeVllm

TRUE_A, TRUE_B = 0.012, 2.5e-5  # seconds, seconds per batched token
PRIOR = StepTimePrior(
    intercept_s=0.008,
    slope_s=1.5e-5,
    intercept_stddev_s=0.005,
    slope_stddev_s=1e-5,
    noise_stddev_s=0.002,
)


def points(ns: Sequence[float], seed: int, steps: float = 500) -> list[CostPoint]:
    rng = random.Random(seed)
    noise = PRIOR.noise_stddev_s / steps**0.5
    return [CostPoint(n, TRUE_A + TRUE_B * n + rng.gauss(0, noise), steps) for n in ns]


def test_point_uses_verified_tokens_and_wall_time_per_engine() -> None:
    engine = FakeVllm(k=3, engines=2)
    engine.load(running=8, engine=0)
    engine.load(running=8, engine=1)
    before = snapshot_from_reading(parse_exposition(engine.page(), 100.0))
    # 400 steps over 2 engines in 10 s: 50 ms per step. 8 requests x 4 verified tokens,
    # of which each request emitted 1 + 1.5 accepted.
    engine.steps([8 * 2.5] * 200, engine=0)
    engine.steps([8 * 2.5] * 200, engine=1)
    engine.draft(3200, [2400, 1600, 800])
    after = snapshot_from_reading(parse_exposition(engine.page(), 110.0))
    point = cost_point(interval_between(before, after))
    assert point is not None
    assert point.steps == 400
    assert point.step_seconds == pytest.approx(0.05)
    assert point.batched_tokens == pytest.approx(8 * 4)
    # Each decoding request emits one token besides its accepted drafts: 8 decode a step.
    assert point.decoding == pytest.approx(8) and point.drafts == pytest.approx(8)


def test_first_tokens_of_prefills_are_not_decode_steps_and_sizes_keep_their_spread() -> None:
    engine = FakeVllm(k=3)
    engine.load(running=8)
    before = snapshot_from_reading(parse_exposition(engine.page(), 100.0))
    # 190 decode steps of 8 requests, and 10 steps that each finished a 600-token prefill,
    # whose first token is counted as generated but drafted nothing.
    engine.steps([8 * 2.5] * 190 + [600.0] * 10)
    engine.draft(1520, [1140, 760, 380])
    engine._m("vllm:generation_tokens", 0).inc(10)
    for _ in range(10):
        engine._m("vllm:time_to_first_token_seconds", 0).observe(0.2)
    after = snapshot_from_reading(parse_exposition(engine.page(), 110.0))
    point = cost_point(interval_between(before, after))
    assert point is not None
    assert point.decoding == pytest.approx(1520 / 200) == pytest.approx(point.drafts)
    # the prefill steps stand apart from the decode steps, at the mean's scale
    (small, small_share), *_, (large, large_share) = point.spread
    assert small_share == pytest.approx(0.95) and large_share == pytest.approx(0.05)
    assert large > 10 * small
    assert sum(n * w for n, w in point.spread) == pytest.approx(point.batched_tokens)


def test_idle_or_restarted_intervals_give_no_point() -> None:
    engine = FakeVllm(k=1)
    engine.load(running=0)
    before = snapshot_from_reading(parse_exposition(engine.page(), 0.0))
    engine.steps([4] * 10)
    after = snapshot_from_reading(parse_exposition(engine.page(), 10.0))
    assert cost_point(interval_between(before, after)) is None  # idle at the start
    restarted = FakeVllm(k=1)
    restarted.load(running=3)
    restarted.steps([4] * 2)
    assert cost_point(interval_between(after, snapshot_from_reading(
        parse_exposition(restarted.page(), 20.0)))) is None  # fmt: skip


def test_no_data_is_the_prior() -> None:
    fit = fit_step_time([], PRIOR)
    assert (fit.intercept_s, fit.slope_s) == pytest.approx((PRIOR.intercept_s, PRIOR.slope_s))
    assert fit.intercept_stddev_s == pytest.approx(PRIOR.intercept_stddev_s)
    assert fit.points == 0


def test_fit_moves_from_the_prior_to_the_truth() -> None:
    ns = [16, 32, 48, 64, 128, 256, 384, 512] * 5
    fit = fit_step_time(points(ns, seed=5), PRIOR)
    assert fit.intercept_s == pytest.approx(TRUE_A, rel=0.02)
    assert fit.slope_s == pytest.approx(TRUE_B, rel=0.02)
    assert abs(fit.intercept_s - TRUE_A) <= 3 * fit.intercept_stddev_s
    assert abs(fit.slope_s - TRUE_B) <= 3 * fit.slope_stddev_s
    few = fit_step_time(points(ns[:3], seed=5), PRIOR)
    assert few.slope_stddev_s > fit.slope_stddev_s


def test_points_at_one_batch_pin_the_line_there_and_leave_the_slope_near_the_prior() -> None:
    fit = fit_step_time(points([40.0] * 20, seed=6), PRIOR)
    assert fit.seconds(40.0) == pytest.approx(TRUE_A + TRUE_B * 40, rel=0.01)
    assert fit.correlation < -0.9  # intercept and slope traded against each other
    assert fit.slope_stddev_s > 0.5 * PRIOR.slope_stddev_s


def test_prior_is_the_model_line_at_k_and_the_adjusted_model_reproduces_the_fit() -> None:
    model = StepCostModel(
        t_fixed=0.006, c_tok=2e-5, c_kv=4e-8, t_overhead=0.001,
        draft=DraftCost(t_fixed=0.0005, c_tok=8e-7),
    )  # fmt: skip
    k, context = 3, 1500.0
    prior = prior_from_model(model, k, context)
    for batch in (1, 8, 64, 200):
        shape = StepShape(batch, k, round(batch * context))
        assert prior.intercept_s + prior.slope_s * shape.batched_tokens == pytest.approx(
            model.step_time(shape), rel=1e-3
        )
    fit = fit_step_time(points([32, 64, 128, 256] * 4, seed=7), prior)
    adjusted = adjusted_cost_model(model, prior, fit)
    for batch in (4, 32, 100):
        shape = StepShape(batch, k, round(batch * context))
        assert adjusted.step_time(shape) == pytest.approx(
            fit.seconds(shape.batched_tokens), rel=1e-3
        )


def test_a_fit_far_below_the_prior_leaves_no_negative_term() -> None:
    """A few fast steps (an engine just started) must not make a step take negative time,
    which would turn every predicted throughput negative."""
    model = StepCostModel(
        t_fixed=0.006, c_tok=2e-5, c_kv=4e-8, t_overhead=0.001,
        draft=DraftCost(t_fixed=0.0005, c_tok=8e-7),
    )  # fmt: skip
    prior = prior_from_model(model, 3, 1500.0)
    fast = [CostPoint(batched_tokens=n, step_seconds=1e-4, steps=500) for n in (4, 8, 2000)]
    fit = fit_step_time(fast, prior)
    assert fit.intercept_s - prior.intercept_s < -model.t_fixed  # the fit asks for < 0
    adjusted = adjusted_cost_model(model, prior, fit)
    assert adjusted.t_fixed >= 0.0 and adjusted.c_tok >= 0.0
    for batch in (1, 64, 256):
        assert adjusted.step_time(StepShape(batch, 3, batch * 1500)) > 0.0


def test_an_engine_that_idled_between_readings_is_timed_by_its_requests_gaps() -> None:
    engine = FakeVllm(k=3)
    engine.load(running=8)
    readings = [snapshot_from_reading(parse_exposition(engine.page(), 100.0))]

    def ten_seconds(steps: int, gap_s: float) -> float:
        """``steps`` steps of 8 requests drafting 3, each request's gaps ``gap_s``; the
        interval's step time."""
        engine.steps([8 * 2.5] * steps)
        engine.draft(8 * steps, [6 * steps, 4 * steps, 2 * steps])
        engine.latencies(tpot=[], itl=[gap_s] * 8 * steps)
        readings.append(
            snapshot_from_reading(parse_exposition(engine.page(), 100.0 + 10 * len(readings)))
        )
        point = cost_point(interval_between(*readings[-2:]))
        assert point is not None
        return point.step_seconds

    # 200 steps of 25 ms, then every request done and the engine idle until new ones came:
    # 10 s of wall time hold 5 s of steps, and the requests' gaps between tokens say 25 ms.
    assert ten_seconds(200, 0.025) == pytest.approx(0.025)
    # Busy throughout, the wall time per step stands: 400 steps in 10 s, the gaps weighing
    # the larger steps more (26 ms).
    assert ten_seconds(400, 0.026) == pytest.approx(0.025)
