"""The step-time posterior: the prior is the profile, data moves it, draws spread as it should."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from specops.policy import (
    TERMS,
    AcceptanceCurve,
    CostEvidence,
    CostPosterior,
    Prompts,
    SpeedModel,
    StepPoint,
    StepShape,
    best_k_by_batch,
    cost_prior,
    crossovers,
    draw_crossovers,
)
from tests.policy.fit import H100_FIT

PROFILE = H100_FIT
ACCEPTANCE = AcceptanceCurve((0.647, 0.390, 0.241, 0.158, 0.106, 0.065, 0.065))
CONTEXT = 700


TABLE_S = 1.5e-3  # what the engine below charges per step while a table is set


def _truth(batch: int, k: int, table: bool = False) -> float:
    """An engine the profile does not know: drafting costs 25x more per token, a knee.

    Under a table it charges ``TABLE_S`` a step, and a k = 0 row still drafts once.
    """
    tokens = batch * (k + 1)
    target = max(5.9e-3, 2.0e-5 * tokens) + 3.9e-8 * batch * CONTEXT + 1.2e-3
    positions = max(k, 1) if table else k
    if positions == 0:
        return target
    return target + 2.2e-3 + positions * (1.9e-4 + 2.0e-5 * batch) + (TABLE_S if table else 0.0)


def _points(
    k: int, batches: list[int], start: float = 0.0, *, table: bool = False
) -> list[StepPoint]:
    return [
        StepPoint(
            batched_tokens=b * (k + 1),
            context_tokens=b * CONTEXT,
            positions=k,
            drafted=b * k,
            speculating=1.0 if k else 0.0,
            step_seconds=_truth(b, k, table),
            steps=100,
            end=start + i,
            decoding=b,
            table=table,
        )
        for i, b in enumerate(batches)
    ]


def _best(cost: object) -> tuple[int, ...]:
    return best_k_by_batch(SpeedModel(cost, ACCEPTANCE, CONTEXT), range(8), 256)  # type: ignore[arg-type]


class _Truth:
    def step_time(self, shape: StepShape) -> float:
        return _truth(shape.batch, shape.k)


def test_with_no_data_the_posterior_is_the_profile_and_the_drafts_unpriced_cost() -> None:
    prior = cost_prior(PROFILE)
    model = CostPosterior.of(prior, CostEvidence()).model()
    drafted = TERMS.index("per_drafted")
    # the half-normal's mean of what the profile leaves unpriced, per drafted token
    unpriced = prior.stddev[drafted] * math.sqrt(2.0 / math.pi) * 1e-3
    assert prior.mean[drafted] * 1e-3 == pytest.approx(PROFILE.draft.c_tok + unpriced)
    for batch, k in [(1, 0), (8, 3), (64, 5), (256, 1)]:
        shape = StepShape(batch, k, batch * CONTEXT)
        # equal below the knee; past it the roofline lets KV reads hide under compute,
        # while the terms add them (as separate kernels do)
        expected = PROFILE.step_time(shape) + batch * k * unpriced
        assert model.step_time(shape) == pytest.approx(expected, rel=0.35)


def test_points_at_two_ks_teach_the_crossover_the_prior_misses() -> None:
    prior = cost_prior(PROFILE)
    truth = _best(_Truth())
    assert truth[200] == 0 and _best(CostPosterior.of(prior, CostEvidence()).model())[200] > 0
    evidence = CostEvidence().add(_points(3, [1, 4, 16, 64, 128]), prior)
    evidence = evidence.add(_points(0, [64, 128, 200, 256], start=100.0), prior)
    learned = _best(CostPosterior.of(prior, evidence).model())
    # where drafting stops (the truth: batch 190) within 10 %, every k within 2 of the truth's
    assert learned.index(0) == pytest.approx(truth.index(0), rel=0.1)
    assert all(k == 0 for k in learned[learned.index(0) :])
    assert all(abs(a - b) <= 2 for a, b in zip(learned, truth, strict=True))
    assert evidence.ks == (0, 3)


def test_steps_at_one_k_longer_than_the_profile_says_are_put_on_drafting() -> None:
    # The engine's per-drafted-token cost is 25x the profile's head compute; only k = 3 ran,
    # at batches around 160, where off is 18 % ahead on the engine. The weights read is
    # priced by the profile, the verification's host work is not: the excess goes mostly to
    # drafting rather than to what off pays too, and the prediction favours off as well.
    prior = cost_prior(PROFILE)
    evidence = CostEvidence().add(_points(3, [144, 152, 160, 168, 176] * 4), prior)
    model = CostPosterior.of(prior, evidence).model()
    assert model.step_time(StepShape(160, 3, 160 * CONTEXT)) == pytest.approx(
        _truth(160, 3), rel=0.05
    )
    speed = SpeedModel(model, ACCEPTANCE, CONTEXT)
    assert _truth(160, 3) > 1.15 * ACCEPTANCE.expected_tokens(3) * _truth(160, 0)
    assert speed.point(160, 0).throughput > speed.point(160, 3).throughput


def test_each_point_counts_once() -> None:
    prior = cost_prior(PROFILE)
    once = CostEvidence().add(_points(3, [4, 8]), prior)
    assert once.add(_points(3, [4, 8]), prior) == once
    assert once.points == 2 and once.steps == 200


def test_draws_spread_where_the_data_is_silent_and_narrow_where_it_speaks() -> None:
    prior = cost_prior(PROFILE)
    evidence = CostEvidence().add(_points(3, [16, 32, 48, 64] * 5), prior)
    posterior = CostPosterior.of(prior, evidence)
    seen = StepShape(32, 3, 32 * CONTEXT)
    unseen = StepShape(32, 7, 32 * CONTEXT)
    assert posterior.stddev(seen) < 0.05 * _truth(32, 3)
    assert posterior.stddev(unseen) > 2 * posterior.stddev(seen)
    draws = posterior.draws(64, seed=1)
    spread = [d.step_time(seen) for d in draws]
    assert max(spread) - min(spread) < 0.2 * _truth(32, 3)
    assert posterior.draws(4, seed=7) == posterior.draws(4, seed=7)


def test_a_point_far_from_every_prediction_is_taken_for_a_broken_interval() -> None:
    prior = cost_prior(PROFILE)
    good = _points(3, [8])
    broken = StepPoint(32.0, 5600.0, 3.0, 24.0, 1.0, 0.5, 100, 5.0)  # 0.5 s for batch 8
    evidence = CostEvidence().add([*good, broken], prior)
    assert evidence.points == 1
    assert evidence.until == good[0].end


def test_an_engine_far_slower_than_the_profile_is_learned_not_ignored() -> None:
    """A draft ten times the profile's puts every step far from the prior's prediction:
    a window of such points is the engine, and one broken interval among them still goes."""
    prior = cost_prior(PROFILE)
    slow = [replace(p, step_seconds=p.step_seconds * 10) for p in _points(3, [8, 16, 32, 64])]
    broken = replace(slow[0], step_seconds=slow[0].step_seconds * 20, end=10.0)
    evidence = CostEvidence().add([*slow, broken], prior)
    assert evidence.points == len(slow) and evidence.until == slow[-1].end
    learned = CostPosterior.of(prior, evidence).model()
    for point in slow:
        shape = StepShape(round(point.decoding), 3, round(point.context_tokens))
        assert learned.step_time(shape) == pytest.approx(point.step_seconds, rel=0.25)


def _prior_points(k: int, batches: list[int], times: float) -> list[StepPoint]:
    """Points whose steps took ``times`` what the prior predicts for them."""
    prior = CostPosterior.of(cost_prior(PROFILE), CostEvidence()).model()
    return [
        replace(
            p,
            step_seconds=times
            * prior.step_time(StepShape(round(p.decoding), k, round(p.context_tokens))),
        )
        for p in _points(k, batches)
    ]


def test_how_many_times_the_prior_the_steps_took() -> None:
    prior = cost_prior(PROFILE)
    assert CostEvidence().times_prior(prior) is None
    for times in (0.7, 1.0, 12.0):
        evidence = CostEvidence().add(_prior_points(3, [2, 8, 32], times), prior)
        assert evidence.times_prior(prior) == pytest.approx(times, rel=1e-6)


def test_the_splits_other_end_puts_all_the_excess_on_the_draft() -> None:
    """Steps at k = 3 twelve times the prior's: the posterior puts the excess mostly on
    what off pays too; its other end leaves the target at the prior's and the draft
    pays the rest, so the measured steps are met either way and off differs fivefold."""
    prior = cost_prior(PROFILE)
    evidence = CostEvidence().add(_prior_points(3, [2, 2, 2, 2], 12.0), prior)
    posterior = CostPosterior.of(prior, evidence)
    excess = posterior.draft_excess()
    assert excess is not None
    measured, off = StepShape(2, 3, 2 * CONTEXT), StepShape(2, 0, 2 * CONTEXT)
    unmeasured = CostPosterior.of(prior, CostEvidence()).model()
    assert excess.step_time(measured) == pytest.approx(12.0 * unmeasured.step_time(measured))
    assert excess.step_time(off) == pytest.approx(unmeasured.step_time(off))
    assert posterior.model().step_time(off) > 5.0 * excess.step_time(off)
    # steps no longer than the prior's leave the draft nothing to take
    cheap = CostEvidence().add(_prior_points(3, [2, 8], 0.8), prior)
    assert CostPosterior.of(prior, cheap).draft_excess() is None


def _table_points(rows: list[tuple[int, int]], start: float) -> list[StepPoint]:
    return [p for i, (b, k) in enumerate(rows) for p in _points(k, [b], start + i, table=True)]


def test_a_table_and_its_zero_rows_are_priced_from_runs_with_and_without_one() -> None:
    # One draft position per zero row (vLLM's), the table's own cost a wrong prior at first.
    prior = cost_prior(PROFILE, table_s=0.5e-3, zero_row_positions=1)
    rows = [(1, 3), (4, 3), (16, 3), (64, 3), (128, 0), (200, 0), (256, 0)]
    evidence = CostEvidence().add(_table_points(rows, 0.0), prior)
    # the zero rows ran under a table: they say nothing of speculation off
    assert evidence.ks == (3,)
    evidence = evidence.add(_points(0, [64, 128, 200, 256], start=100.0), prior)
    evidence = evidence.add(_points(3, [1, 4, 16, 64], start=200.0), prior)
    assert evidence.ks == (0, 3)
    model = CostPosterior.of(prior, evidence).model()
    off = model.step_time(StepShape(200, 0, 200 * CONTEXT))
    zero_row = model.step_time(StepShape(200, 0, 200 * CONTEXT, table=True))
    assert off == pytest.approx(_truth(200, 0), rel=0.03)
    # the zero row costs a draft pass and the table's own cost over speculation off
    assert zero_row - off == pytest.approx(_truth(200, 0, table=True) - _truth(200, 0), rel=0.15)
    on = StepShape(16, 3, 16 * CONTEXT)
    assert model.step_time(replace(on, table=True)) - model.step_time(on) == pytest.approx(
        TABLE_S, rel=0.3
    )


@pytest.mark.parametrize("table", [False, True])
def test_a_steps_time_is_exactly_the_price_of_its_features(table: bool) -> None:
    """The step time is inlined for speed: it must be the same float as pricing the
    features the fit uses, for every shape (prefills past the knee and both knees too)."""
    from specops.policy._learn import LearnedCost

    cost = LearnedCost(
        coefficients=(4.1e-3, 2.3e-2, 3.9e-2, 7.0e-3, 1.1e-2, 1.9e-4, 2.0e-2, 2.2e-3, 1.5e-3),
        knee_tokens=400.0,
        floor_s=1e-3,
        zero_row_positions=1,
    )
    for batch in (0, 1, 7, 64, 255):
        for k in range(8):
            for prefill in (0, 300, 2048):
                shape = StepShape(batch, k, batch * CONTEXT, prefill, table)
                assert cost.step_time(shape) == cost.seconds(cost.features(shape))


@pytest.mark.parametrize("floor_s", [1e-5, 9e-3])
def test_each_draws_crossovers_are_those_of_its_own_speed_model(floor_s: float) -> None:
    """Pricing every draw through each point's mean features finds the crossovers a
    speed model per draw finds, prompts spread over the steps and a floor that binds on
    the smallest steps (9 ms) or on none."""
    prior = cost_prior(PROFILE)
    evidence = CostEvidence().add(_points(3, [4, 32, 96, 160]), prior)
    draws = tuple(
        replace(d, floor_s=floor_s) for d in CostPosterior.of(prior, evidence).draws(12, seed=7)
    )
    prompts = Prompts(per_output_token=0.8, mean_tokens=600.0)
    ks = tuple(range(1, 8))
    expected = tuple(
        crossovers(SpeedModel(d, ACCEPTANCE, CONTEXT, prompts), ks, 256) for d in draws
    )
    models = tuple(SpeedModel(d, ACCEPTANCE, CONTEXT, prompts) for d in draws)
    assert draw_crossovers(models, ks, 256) == expected
    assert len({c for drawn in expected for c in drawn}) > len(ks)  # the draws disagree


def test_draw_crossovers_refuse_models_that_price_unlike_draws() -> None:
    """The margins are found once from the first model: models that differ in anything
    but their draw, or whose cost is no draw, are refused rather than priced wrongly."""
    prior = cost_prior(PROFILE)
    draws = CostPosterior.of(prior, CostEvidence()).draws(4, seed=3)
    models = [SpeedModel(d, ACCEPTANCE, CONTEXT) for d in draws]
    assert draw_crossovers((), (1, 2), 256) == ()
    other = SpeedModel(draws[1], AcceptanceCurve((0.5, 0.3)), CONTEXT)
    with pytest.raises(ValueError, match="share the acceptance"):
        draw_crossovers((models[0], other), (1, 2), 256)
    with pytest.raises(TypeError, match="posterior draw"):
        draw_crossovers((models[0], SpeedModel(PROFILE, ACCEPTANCE, CONTEXT)), (1,), 256)
