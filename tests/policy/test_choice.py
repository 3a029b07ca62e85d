"""The policy against hand-computed cases of a cost model simple enough to do on paper.

Step time 10 ms + 1 ms per batched token, nothing else; per-token acceptance 0.5, so
E(1) = 1.5, E(2) = 1.75, E(3) = 1.875. TPOT(k, B) = (10 + (k + 1) B) / E(k) ms.
"""

import math

import pytest

from specops.policy import (
    AcceptanceCurve,
    BatchDistribution,
    Crossover,
    DraftCost,
    Objective,
    ObjectiveKind,
    PolicyInput,
    Prompts,
    SpecConfig,
    SpeedModel,
    StepCostModel,
    StepShape,
    TpotSpread,
    best_k_by_batch,
    choose,
    crossovers,
    merge_ranges,
    relative_gain,
    speed_model,
)

COST = StepCostModel(t_fixed=0.010, c_tok=0.001, c_kv=0.0, t_overhead=0.0, draft=DraftCost())
HALF = AcceptanceCurve.geometric(0.5, 3)
MODEL = SpeedModel(COST, HALF, context_tokens=0)


def _inputs(load: dict[int, float], table: bool = False, **kw: object) -> PolicyInput:
    fields: dict[str, object] = {
        "per_batch_size": table,
        "acceptance": HALF,
        "drafts_seen": 0,
        "load": BatchDistribution.from_weights(load),
        "cost": COST,
        "context_tokens": 0,
        "current": SpecConfig.static(1),
        "k_max": 3,
        "max_batch": 64,
    }
    return PolicyInput(**{**fields, **kw})  # type: ignore[arg-type]


def test_crossover_of_a_known_cost_model() -> None:
    # k=1: (10 + 2B) / 1.5 >= 10 + B  <=>  B >= 10
    # k=2: (10 + 3B) / 1.75 >= 10 + B <=>  B >= 6
    # k=3: (10 + 4B) / 1.875 >= 10 + B <=> B >= 4.12, so 5
    assert crossovers(MODEL, (1, 2, 3), max_batch=64) == (
        Crossover(1, 10),
        Crossover(2, 6),
        Crossover(3, 5),
    )


def test_crossover_beyond_the_limit_is_reported_as_never() -> None:
    assert crossovers(MODEL, (1,), max_batch=9) == (Crossover(1, None),)


def test_equal_inputs_share_one_speed_model_whose_points_are_a_fresh_ones() -> None:
    shared = speed_model(COST, HALF, 0.0, Prompts(), TpotSpread())
    assert speed_model(COST, AcceptanceCurve.geometric(0.5, 3), 0.0, Prompts(), TpotSpread()) is (
        shared
    )
    assert speed_model(
        COST, AcceptanceCurve.geometric(0.6, 3), 0.0, Prompts(), TpotSpread()
    ) is not (shared)
    fresh = SpeedModel(COST, HALF, context_tokens=0)
    for batch, k, table in ((1, 0, False), (7, 2, False), (7, 2, True), (64, 3, True)):
        assert shared.point(batch, k, table) == fresh.point(batch, k, table)


def test_point_estimate_is_step_time_over_expected_tokens() -> None:
    point = MODEL.point(4, 1)
    assert point.step_s == pytest.approx(0.018)
    assert point.tpot_s == pytest.approx(0.012)
    assert point.throughput == pytest.approx(4 * 1.5 / 0.018)


def test_best_k_per_batch_and_merged_table() -> None:
    # B=1: k=2 (1.75/13) beats k=3 (1.875/14), k=1 (1.5/12); B=2: k=2 (3.5/16);
    # B=3..9: k=1; B=10 ties k=1 with k=0 (15/30 = 10/20), the shorter k wins.
    best = best_k_by_batch(MODEL, (0, 1, 2, 3), max_batch=12)
    assert best == (2, 2, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0)
    assert [r.as_list() for r in merge_ranges(best)] == [[1, 2, 2], [3, 9, 1], [10, 12, 0]]


def test_schedule_methods_get_the_table_with_its_cap() -> None:
    # B=1 is best at k=2 and B=4 at k=1: the table beats both single k's on this load.
    choice = choose(_inputs({1: 0.5, 4: 0.5}, table=True))
    assert choice.schedule
    assert choice.config == SpecConfig.table([[1, 2, 2], [3, 9, 1], [10, 64, 0]])
    assert choice.config.num_speculative_tokens == 2
    assert "per-batch-size table" in choice.reason


class _TableCharged:
    """COST, plus 1 ms per step while a table is set (as vLLM's PIECEWISE graphs cost)."""

    def step_time(self, shape: StepShape) -> float:
        return COST.step_time(shape) + (0.001 if shape.table else 0.0)


def test_a_table_that_runs_one_k_at_this_load_loses_to_that_k() -> None:
    # At B=4 the best table drafts k=1, as k=1 alone does; the table's own cost decides.
    free = choose(_inputs({4: 1.0}, table=True))
    charged = choose(_inputs({4: 1.0}, table=True, cost=_TableCharged()))
    assert free.config == charged.config == SpecConfig.static(1)
    assert "no table it could run beats it" in charged.reason
    (table,) = [c for c in charged.candidates if c.config.per_batch_size]
    assert table.config.k_for_batch(4) == 1
    assert table.throughput == pytest.approx(4 * 1.5 / 0.019)


def test_one_k_when_no_table_applies() -> None:
    # at B=4: k=1 gives 6/18, k=2 7/22, k=3 7.5/26 tokens per ms
    choice = choose(_inputs({4: 1.0}))
    assert choice.config == SpecConfig.static(1)
    assert choice.predicted.throughput == pytest.approx(4 * 1.5 / 0.018)
    assert choice.gain_over_off == pytest.approx((6 / 18) / (4 / 14) - 1)
    assert "one k" in choice.reason


def test_no_table_means_one_k() -> None:
    choice = choose(_inputs({4: 1.0}, table=False))
    assert not choice.schedule
    assert choice.config == SpecConfig.static(1)


def test_off_when_load_stays_above_every_crossover() -> None:
    choice = choose(_inputs({50: 0.5, 60: 0.5}, table=True))
    assert choice.config.is_off
    assert "stays above every crossover" in choice.reason
    assert "frees the draft model's memory" in choice.reason


def test_objectives_disagree_on_a_spread_load() -> None:
    # 60 % of the time B=2, 40 % B=20.
    # throughput: k=0 .6*166.7 + .4*666.7 = 366.7, k=1 .6*214.3 + .4*600 = 368.6 tokens/s:
    #   +0.5 %, below the 1 % a draft model must earn, so off.
    # mean TPOT: k=0 .6*12 + .4*30 = 19.2 ms, k=1 .6*9.33 + .4*33.3 = 18.93 ms: +1.4 %, k=1.
    load = {2: 0.6, 20: 0.4}
    assert choose(_inputs(load)).config.is_off
    latency = choose(_inputs(load, objective=Objective(ObjectiveKind.LATENCY)))
    assert latency.config == SpecConfig.static(1)
    assert latency.predicted.mean_tpot_s == pytest.approx(0.6 * 14 / 1.5e3 + 0.4 * 50 / 1.5e3)


def test_goodput_counts_only_batches_within_the_target_when_requests_are_alike() -> None:
    # 10 ms target: k=0 misses at both B=2 (12 ms) and B=20 (30 ms), so its goodput is 0;
    # at B=2, k=1 (9.33 ms), k=2 (9.14 ms) and k=3 (9.6 ms) meet it; k=2 delivers most.
    goodput = Objective(ObjectiveKind.GOODPUT, tpot_target_s=0.010)
    alike = TpotSpread(base=0.0, heterogeneity=0.0)
    choice = choose(_inputs({2: 0.5, 20: 0.5}, objective=goodput, spread=alike))
    assert choice.config == SpecConfig.static(2)
    assert choice.baseline.goodput == 0.0
    assert choice.predicted.goodput == pytest.approx(0.5 * 2 * 1.75 / 0.016)
    assert "goodput within a 10 ms TPOT target" in choice.reason


def test_goodput_counts_the_share_of_requests_within_the_target() -> None:
    """Requests spread around a config's mean TPOT: one just under the target loses the
    requests above it, one just over keeps those below it."""
    goodput = Objective(ObjectiveKind.GOODPUT, tpot_target_s=0.010)
    spread = TpotSpread(base=0.1, heterogeneity=0.0)
    choice = choose(_inputs({2: 1.0}, objective=goodput, spread=spread))
    k2 = next(p for p in choice.candidates if p.config == SpecConfig.static(2))
    # k=2 at B=2: 9.14 ms against 10 ms, log sd 0.1
    share = 0.5 * (1 + math.erf((math.log(10 / (16 / 1.75)) + 0.005) / 0.1 / math.sqrt(2)))
    assert k2.goodput == pytest.approx(k2.throughput * share)
    assert 0.8 < share < 0.9
    # off at 12 ms still has the requests that run faster than its mean
    assert 0 < choice.baseline.goodput < 0.1 * choice.baseline.throughput
    assert "measured" not in choice.reason and "the prior" in choice.reason


@pytest.mark.parametrize(("target_s", "most", "best"), [(0.007, 0.01, 0.0), (0.0078, 0.1, 0.05)])
def test_goodput_that_only_the_far_tail_of_requests_meets_counts_as_none(
    target_s: float, most: float, best: float
) -> None:
    """At batch 2 with log sd 0.1 every config meets a 7 ms target for under 1 % of its
    tokens, and a 7.8 ms one for under 10 % (k=2 6 %, k=1 4 %): a tail the spread does not
    resolve, so throughput decides the choice and its gain over off, as where no config
    meets the target at all."""
    goodput = Objective(ObjectiveKind.GOODPUT, tpot_target_s=target_s)
    spread = TpotSpread(base=0.1, heterogeneity=0.0)
    choice = choose(_inputs({2: 1.0}, objective=goodput, spread=spread))
    assert all(0 < p.goodput < most * p.throughput for p in choice.candidates)
    assert max(p.goodput / p.throughput for p in choice.candidates) >= best
    assert all(p.value == 0 for p in choice.candidates)
    assert choice.predicted.throughput == max(p.throughput for p in choice.candidates)
    gain = choice.predicted.throughput / choice.baseline.throughput - 1.0
    assert relative_gain(choice.predicted, choice.baseline) == pytest.approx(gain)
    assert (
        "throughput (no config is predicted to meet the target for 10% of its tokens)"
        in choice.reason
    )
    assert "goodput within" not in choice.reason


def test_goodput_objective_needs_a_target() -> None:
    with pytest.raises(ValueError, match="tpot_target_s"):
        Objective(ObjectiveKind.GOODPUT)


def test_thin_acceptance_measurements_are_shaded() -> None:
    shaded = HALF.lower_bound(drafts=100, z=1.0)
    assert shaded.rates[0] == pytest.approx(0.5 - 0.05)
    assert shaded.rates[1] == pytest.approx(0.25 - (0.25 * 0.75 / 100) ** 0.5)
    few = choose(_inputs({4: 1.0}, drafts_seen=25))
    many = choose(_inputs({4: 1.0}, drafts_seen=10**8))
    assert few.predicted.throughput < many.predicted.throughput
    assert many.predicted.throughput == pytest.approx(4 * 1.5 / 0.018, rel=1e-3)


def test_prediction_of_the_config_in_force() -> None:
    choice = choose(_inputs({4: 1.0}, table=True))
    # the config in force is k=1 everywhere; at B=4 the table also says k=1
    assert choice.current.throughput == pytest.approx(choice.predicted.throughput)
    assert choice.gain_over_current == pytest.approx(0.0)


def test_bad_bounds_are_rejected() -> None:
    with pytest.raises(ValueError, match="k bounds"):
        _inputs({4: 1.0}, k_min=3, k_max=2)


def test_prompts_entering_as_requests_finish_share_each_step_and_shrink_the_gain() -> None:
    """At batch B a step emits B E(k) tokens, and in steady state brings in the prompts of as
    many finished requests: ``per_output_token`` prompt tokens per output token (spread
    evenly when a prompt's length is unknown)."""
    cost = StepCostModel(
        t_fixed=5e-3, c_tok=2e-5, c_kv=0.0, t_overhead=1e-3, draft=DraftCost(t_fixed=2e-3)
    )
    curve = AcceptanceCurve((0.7, 0.45, 0.28))
    shared = SpeedModel(cost, curve, 0.0, Prompts(per_output_token=1.2))
    point = shared.point(128, 3)
    tokens = curve.expected_tokens(3)
    assert point.step_s == pytest.approx(
        cost.step_time(StepShape(128, 3, 0, prefill_tokens=round(128 * tokens * 1.2)))
    )

    def gain(rho: float) -> float:
        inputs = PolicyInput(
            acceptance=curve,
            drafts_seen=100_000,
            load=BatchDistribution.from_samples([128] * 50),
            cost=cost,
            context_tokens=0.0,
            current=SpecConfig.static(3),
            prompts=Prompts(per_output_token=rho),
            per_batch_size=False,
        )
        return choose(inputs).gain_over_off

    assert gain(1.2) < 0.8 * gain(0.0)
