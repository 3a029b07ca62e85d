"""The slow loop against a cost model simple enough to check by hand.

Step time 10 ms + 1 ms per batched token; per-token acceptance 0.5. At batch 4 with one
k (n-gram): k=1 gives 6/18 tokens per ms, k=3 7.5/26, so moving from k=3 to k=1 gains
(6/18) / (7.5/26) - 1 = 15.6 %.
"""

import random
from dataclasses import replace

import pytest

from specops.control import (
    Action,
    ControlInput,
    ControllerState,
    ControlSettings,
    Decision,
    Mode,
    PastRegime,
    ReasonCode,
    ServiceModel,
    decide,
)
from specops.policy import (
    AcceptanceCurve,
    BatchDistribution,
    CostEvidence,
    DraftCost,
    Objective,
    ObjectiveKind,
    SpecConfig,
    StepCostModel,
    StepPoint,
    TpotHistogram,
    cost_prior,
    draft_reach,
)

COST = StepCostModel(t_fixed=0.010, c_tok=0.001, c_kv=0.0, t_overhead=0.0, draft=DraftCost())
ONE_K = ServiceModel(
    method="suffix", cost=cost_prior(COST, relative_stddev=1e-3, floor_fraction=1e-3), max_batch=64
)
EAGLE = ServiceModel(
    method="eagle3", cost=cost_prior(COST, relative_stddev=1e-3, floor_fraction=1e-3), max_batch=64
)
SETTINGS = ControlSettings(
    k_max=3,
    restart_cost_s=30.0,
    min_dwell_s=300.0,
    min_drafts=1000,
    confidence_z=0.0,
    rollout_timeout_s=900.0,
    margin=2.0,
)
GAIN_K3_TO_K1 = (6 / 18) / (7.5 / 26) - 1


def _window(end: float, batches: list[int], k: int = 3, alpha: float = 0.5) -> ControlInput:
    drafts = 10_000.0 if k else 0.0
    return ControlInput(
        window_end=end,
        load=BatchDistribution.from_samples(batches),
        context_tokens=0,
        num_drafts=drafts,
        accepted_per_position=tuple(drafts * alpha ** (i + 1) for i in range(k)),
        window_s=60.0,
    )


def _steady(end: float, batch: int = 4, k: int = 3) -> ControlInput:
    return _window(end, [batch] * 60, k)


def test_reconfigures_when_the_gain_over_the_regime_beats_the_restart() -> None:
    decision = decide(ControllerState.initial(SpecConfig.static(3)), _steady(0), ONE_K, SETTINGS, 0)
    assert decision.action is Action.RECONFIGURE
    assert decision.config == SpecConfig.static(1)
    assert decision.applied
    # by hand, but for the near-certain prior's expected unpriced drafting cost: a
    # thousandth of a step's time
    assert decision.predicted_gain == pytest.approx(GAIN_K3_TO_K1, rel=5e-3)
    # the restart rule takes the gain likely under the posterior, a little below the mean
    # with a near-certain step-time prior; a new regime is expected to last 600 s
    assert decision.likely_gain is not None
    assert 0.9 * GAIN_K3_TO_K1 < decision.likely_gain <= GAIN_K3_TO_K1
    assert decision.gain_s == pytest.approx(decision.likely_gain * 600)
    assert decision.state.rollout is not None
    assert decision.state.last_good == SpecConfig.static(3)
    assert [c.k for c in decision.crossovers] == [1, 2, 3]


def test_keeps_the_config_when_the_restart_costs_more_than_the_gain() -> None:
    # 94 s of gain < 2 x 100 s; k=1 was never run, but the near-certain prior is sure of
    # the gain, so it is no probe counted past this regime
    costly = replace(SETTINGS, restart_cost_s=100.0)
    decision = decide(ControllerState.initial(SpecConfig.static(3)), _steady(0), ONE_K, costly, 0)
    assert decision.action is Action.KEEP
    assert decision.config == SpecConfig.static(3)
    assert decision.recommended == SpecConfig.static(1)
    assert "does not pay" in decision.reason


def test_a_long_lived_regime_eventually_pays_for_the_restart() -> None:
    costly = replace(SETTINGS, restart_cost_s=100.0)
    state = ControllerState.initial(SpecConfig.static(3))
    actions = []
    for t in range(0, 3001, 300):
        decision = decide(state, _steady(t), ONE_K, costly, t)
        state = decision.state
        actions.append(decision.action)
    # 2 x 100 s of restart needs 200 / 0.156 = 1283 s of regime: first paid at t = 1500
    assert actions.index(Action.RECONFIGURE) == 5
    assert actions.count(Action.RECONFIGURE) == 1


def test_stale_measurements_hold_the_last_good_config() -> None:
    decision = decide(
        ControllerState.initial(SpecConfig.static(3)), _steady(0), ONE_K, SETTINGS, 500
    )
    assert decision.action is Action.WITHHOLD
    assert decision.config == SpecConfig.static(3)
    assert "500s old" in decision.reason


def test_too_few_load_samples_withhold() -> None:
    thin = _window(0, [4, 4, 0, 0])
    decision = decide(ControllerState.initial(SpecConfig.static(3)), thin, ONE_K, SETTINGS, 0)
    assert decision.action is Action.WITHHOLD
    assert "2 busy load samples" in decision.reason


def test_unknown_acceptance_withholds_unless_a_prior_is_given() -> None:
    off = ControllerState.initial(SpecConfig.off())
    decision = decide(off, _steady(0, k=0), ONE_K, SETTINGS, 0)
    assert decision.action is Action.WITHHOLD
    assert "acceptance is unknown" in decision.reason
    with_prior = replace(ONE_K, prior_acceptance=AcceptanceCurve.geometric(0.5, 3))
    decision = decide(off, _steady(0, k=0), with_prior, SETTINGS, 0)
    assert decision.action is Action.RECONFIGURE
    assert decision.config == SpecConfig.static(1)


def test_minimum_dwell_and_hourly_cap_withhold() -> None:
    state = replace(ControllerState.initial(SpecConfig.static(3)), last_change_at=-100.0)
    decision = decide(state, _steady(0), ONE_K, SETTINGS, 0)
    assert decision.action is Action.WITHHOLD
    assert "minimum dwell" in decision.reason
    capped = replace(
        ControllerState.initial(SpecConfig.static(3)),
        changes=(-3000.0, -2500.0, -2000.0, -1500.0),
        last_change_at=-1500.0,
    )
    decision = decide(capped, _steady(0), ONE_K, SETTINGS, 0)
    assert decision.action is Action.WITHHOLD
    assert "cap of 4" in decision.reason


@pytest.mark.parametrize("mode", [Mode.FIXED, Mode.OFF])
def test_fixed_and_off_never_change(mode: Mode) -> None:
    state = ControllerState.initial(SpecConfig.static(3))
    decision = decide(state, _steady(0), ONE_K, replace(SETTINGS, mode=mode), 0)
    assert decision.action is Action.KEEP
    assert decision.config == SpecConfig.static(3)
    assert decision.recommended == SpecConfig.static(1)
    assert not decision.applied


def test_advise_publishes_the_recommendation_only() -> None:
    state = ControllerState.initial(SpecConfig.static(3))
    decision = decide(state, _steady(0), ONE_K, replace(SETTINGS, mode=Mode.ADVISE), 0)
    assert decision.action is Action.WITHHOLD
    assert not decision.applied
    assert decision.recommended == SpecConfig.static(1)
    assert decision.state.config == SpecConfig.static(3)
    assert "mode Advise" in decision.reason


def test_rollout_completes_and_its_duration_becomes_the_restart_cost() -> None:
    started = decide(ControllerState.initial(SpecConfig.static(3)), _steady(0), ONE_K, SETTINGS, 0)
    waiting = decide(started.state, replace(_steady(60), pods_ready=False), ONE_K, SETTINGS, 60)
    assert waiting.action is Action.WITHHOLD
    assert "in progress" in waiting.reason
    ready = decide(waiting.state, _steady(90, k=1), ONE_K, SETTINGS, 90)
    assert ready.action is Action.KEEP
    assert ready.state.rollout is None
    assert ready.state.last_good == SpecConfig.static(1)
    assert ready.state.rollout_durations == (90.0,)
    later = decide(ready.state, _steady(1000, k=1), ONE_K, SETTINGS, 1000)
    assert later.restart_cost_s == pytest.approx(90.0)
    assert later.action is Action.KEEP


def test_rollback_when_new_pods_are_not_ready_then_cooldown() -> None:
    started = decide(ControllerState.initial(SpecConfig.static(3)), _steady(0), ONE_K, SETTINGS, 0)
    not_ready = replace(_steady(1000), pods_ready=False)
    back = decide(started.state, not_ready, ONE_K, SETTINGS, 1000)
    assert back.action is Action.ROLLBACK
    assert back.config == SpecConfig.static(3)
    assert back.applied
    # the k=1 recommendation still pays, but the cooldown holds the last good config
    again = decide(back.state, _steady(1400), ONE_K, SETTINGS, 1400)
    assert again.action is Action.WITHHOLD
    assert "cooling down" in again.reason
    assert again.config == SpecConfig.static(3)


def _noisy(end: float, rng: random.Random, mean: int, k: int) -> ControlInput:
    batches = [max(1, round(rng.gauss(mean, mean * 0.15))) for _ in range(60)]
    drafts = 5000
    accepted = []
    survivors = drafts
    for _ in range(k):
        survivors = sum(rng.random() < 0.5 for _ in range(survivors))
        accepted.append(float(survivors))
    return ControlInput(
        end, BatchDistribution.from_samples(batches), 0, float(drafts), tuple(accepted), 60.0
    )


def test_stationary_noisy_load_causes_no_flapping() -> None:
    rng = random.Random(7)
    state = ControllerState.initial(SpecConfig.static(3))
    actions = []
    for tick in range(120):
        now = 30.0 * tick
        decision = decide(
            state, _noisy(now, rng, 6, state.config.num_speculative_tokens), EAGLE, SETTINGS, now
        )
        state = decision.state
        actions.append(decision.action)
    assert actions.count(Action.RECONFIGURE) == 1
    assert actions[0] is Action.RECONFIGURE


def test_one_reconfiguration_per_regime_change() -> None:
    rng = random.Random(11)
    state = ControllerState.initial(SpecConfig.static(1))
    reconfigured_at = []
    regimes = []
    for tick in range(240):
        now = 30.0 * tick
        mean = 4 if tick < 80 else 50 if tick < 160 else 4
        obs = _noisy(now, rng, mean, state.config.num_speculative_tokens)
        decision = decide(state, obs, ONE_K, SETTINGS, now)
        if decision.action is Action.RECONFIGURE:
            reconfigured_at.append(tick)
        if decision.new_regime:
            regimes.append(tick)
        state = decision.state
    # batch 50 lies above every crossover (k=1 crosses at 10): off, then back to k=1
    assert len(regimes) == 3
    assert len(reconfigured_at) == 2
    assert 80 < reconfigured_at[0] < 160 < reconfigured_at[1]


def test_the_window_acceptance_is_corrected_for_the_positions_a_table_did_not_draft() -> None:
    """Under [[1,16,3],[17,64,1]] at batches around 20 most drafts propose one token: the
    raw share accepted_i / drafts reads [0.80, 0.03, 0.02], as if later positions were
    rarely accepted. The decision reports what the drafts that reached each position say."""
    table = SpecConfig.table([[1, 16, 3], [17, 64, 1]], cap=3)
    rates = (0.80, 0.56, 0.34)
    # 90 % of the samples at batch 20 (k=1), 10 % at batch 8 (k=3); the drafts that reached
    # positions 1 and 2 are those of batch 8, weighted by their steps' share of drafts.
    load = BatchDistribution.from_samples([20] * 54 + [8] * 6)
    state = ControllerState.initial(table)
    reach = draft_reach(table, load, COST, 0.0)
    drafts = 100_000.0
    accepted = tuple(drafts * reach[i] * rates[i] for i in range(3))
    window = ControlInput(
        window_end=0,
        load=load,
        context_tokens=0,
        num_drafts=drafts,
        accepted_per_position=accepted,
        window_s=60.0,
    )
    decision = decide(state, window, EAGLE, SETTINGS, 0)
    assert accepted[1] / drafts < 0.1  # what the raw share would say
    assert decision.window_acceptance is not None
    assert decision.window_acceptance.rates == pytest.approx(rates, rel=0.05)


_VAGUE = ServiceModel(method="suffix", cost=cost_prior(COST), max_batch=64)


def _off_after(service: ServiceModel, *loads: int) -> ControllerState:
    """Off, with off measured at batches 1 and 32, after regimes of 600 s at ``loads``."""
    points = [
        StepPoint(b, 0, 0, 0, 0.0, 0.010 + 0.001 * b, 500, float(i))
        for i, b in enumerate([1, 32] * 5)
    ]
    return replace(
        ControllerState.initial(SpecConfig.off()),
        acceptance=AcceptanceCurve.geometric(0.5, 3),
        acceptance_drafts=10_000.0,
        cost_evidence=CostEvidence().add(points, service.cost),
        regime_lengths=(600.0,) * len(loads),
        past_regimes=tuple(PastRegime(BatchDistribution.constant(b)) for b in loads),
    )


@pytest.mark.parametrize(
    ("service", "code", "cheap_restart_s"),
    [(ONE_K, ReasonCode.GAIN_PAYS_RESTART, 1.0), (_VAGUE, ReasonCode.PROBE, 0.1)],
    ids=["a-change", "a-probe"],
)
def test_an_alternating_load_is_served_by_one_config_when_restarts_eat_the_switching(
    service: ServiceModel, code: ReasonCode, cheap_restart_s: float
) -> None:
    # One k (no table could serve both loads). Batch 1: drafting gains over 40 % over off;
    # batch 32: off beats every k. Restarts of 30 s (x2 margin) at each of two switches per
    # 1200 s cycle cost more than drafting gains at batch 1. With a vague step-time prior
    # and only off measured, batch 1 alone would try k=2 as a probe: a probe for one regime
    # answers to the mixture too.
    measured = _window(0, [1] * 60, k=0)
    alone = decide(_off_after(service), measured, service, SETTINGS, 0)
    assert alone.action is Action.RECONFIGURE and alone.code is code
    assert not alone.config.is_off
    history = _off_after(service, 32, 1, 32)
    kept = decide(history, measured, service, SETTINGS, 0)
    assert kept.action is Action.KEEP and kept.config == SpecConfig.off()
    assert "one config for the recent mixture of loads (3 past regimes and this one" in kept.reason
    # With cheap restarts, switching per regime pays again.
    cheap = decide(history, measured, service, replace(SETTINGS, restart_cost_s=cheap_restart_s), 0)
    assert cheap.code is code and cheap.config == alone.config


def test_switching_per_regime_pays_for_the_windows_that_confirm_each_new_one() -> None:
    """With restarts cheap enough that a change per regime pays, a longer evaluation
    window still tips it: until a new regime is confirmed (1.5 windows at two
    confirmations) the config for the regime before serves the new load, a k at batch 32
    where off wins, off at batch 1 where a k wins."""
    history = _off_after(ONE_K, 32, 1, 32)
    cheap = replace(SETTINGS, restart_cost_s=1.0)
    short = decide(history, _window(0, [1] * 60, k=0), ONE_K, cheap, 0)
    assert short.code is ReasonCode.GAIN_PAYS_RESTART and not short.config.is_off
    long = replace(_window(0, [1] * 60, k=0), window_s=300.0)
    kept = decide(history, long, ONE_K, cheap, 0)
    assert kept.action is Action.KEEP and kept.config == SpecConfig.off()
    assert "one config for the recent mixture of loads" in kept.reason


def test_each_past_regime_is_priced_at_the_context_its_requests_held() -> None:
    """Attention reads each request's context once a step, whatever k: at 1000 tokens a
    request the batch-32 regimes are memory-bound enough for k = 2 to beat off there too,
    so no alternation is left to serve and batch 1 gets its own best. Priced at this
    window's 100 tokens (a past context unmeasured, 0), off serves the mixture."""
    kv = ServiceModel(
        method="suffix",
        cost=cost_prior(replace(COST, c_kv=1e-6), relative_stddev=1e-3, floor_fraction=1e-3),
        max_batch=64,
    )
    measured = replace(_window(0, [1] * 60, k=0), context_tokens=100.0)

    def after(context: float) -> Decision:
        history = _off_after(kv, 32, 1, 32)
        past = tuple(
            replace(p, context_tokens=context if p.load.mean > 1 else 0.0)
            for p in history.past_regimes
        )
        return decide(replace(history, past_regimes=past), measured, kv, SETTINGS, 0)

    unmeasured = after(0.0)
    assert unmeasured.action is Action.KEEP and unmeasured.config == SpecConfig.off()
    assert "one config for the recent mixture of loads" in unmeasured.reason
    long = after(1000.0)
    assert long.action is Action.RECONFIGURE and long.config == SpecConfig.static(2)


def test_on_a_ramp_the_past_loads_are_behind_the_service_and_the_choice_is_this_regimes() -> None:
    """The loads of the alternating test, but falling over the last regimes (32, 16, now
    1): they are not coming back, so the one config that would serve them all (off) is
    not weighed, and batch 1 gets its own best, as with no history at all."""
    measured = _window(0, [1] * 60, k=0)
    alone = decide(_off_after(ONE_K), measured, ONE_K, SETTINGS, 0)

    def after(*loads: int) -> Decision:
        return decide(_off_after(ONE_K, *loads), measured, ONE_K, SETTINGS, 0)

    falling = after(1, 32, 16)
    assert falling.action is Action.RECONFIGURE and falling.config == alone.config
    assert "mixture" not in falling.reason
    # The same loads in another order: they alternate, and come back.
    alternating = after(16, 1, 32)
    assert alternating.action is Action.KEEP and alternating.config == SpecConfig.off()
    assert "one config for the recent mixture of loads" in alternating.reason


def test_a_window_at_a_shorter_k_keeps_what_a_longer_k_measured_past_it() -> None:
    """k=3 measured 0.5 per token at every position; after k=1 windows that measure 0.6 at
    position 1, positions 2 and 3 keep the conditional 0.5 measured before instead of the
    one position's geometric tail (0.6, 0.36, 0.216)."""
    first = decide(ControllerState.initial(SpecConfig.static(3)), _steady(0), ONE_K, SETTINGS, 0)
    state = replace(first.state, config=SpecConfig.static(1), rollout=None)
    state = decide(state, _window(60, [4] * 60, k=1, alpha=0.6), ONE_K, SETTINGS, 60).state
    assert state.acceptance is not None
    assert state.acceptance.rates == pytest.approx((0.6, 0.3, 0.15))
    assert state.regime is not None and state.regime.acceptance is not None
    assert state.regime.acceptance.measured_positions == 3


def test_goodput_counts_requests_by_the_spread_the_window_measured() -> None:
    """At batch 4, k=1 runs at 12 ms a token on average, k=3 at 13.9 ms, against a 12.5 ms
    target: k=1's requests do not all meet it. The window's TPOT histogram (at k=3, 2000
    requests, a tenth under 10 ms) measures how far they spread, and the decision says
    so; without one it counts by the prior."""
    goodput = replace(SETTINGS, objective=Objective(ObjectiveKind.GOODPUT, tpot_target_s=0.0125))
    histogram = TpotHistogram((0.01, 0.025, 0.05), (200.0, 1900.0, 2000.0), 2000.0, 0.0139)
    state = ControllerState.initial(SpecConfig.static(3))
    measured = decide(state, replace(_steady(0), tpot_histogram=histogram), ONE_K, goodput, 0)
    assert "measured from 2000 requests" in measured.reason
    prior = decide(state, _steady(0), ONE_K, goodput, 0)
    assert "the prior" in prior.reason
    # the decision carries the spread it priced with, for the operator's metrics
    assert measured.tpot_spread is not None and measured.tpot_spread.measured_from == 2000
    assert prior.tpot_spread == goodput.tpot_spread
    assert measured.tpot_spread.heterogeneity != prior.tpot_spread.heterogeneity
    # a wide measured spread leaves k=1 fewer of its requests within the target
    assert measured.config == prior.config == SpecConfig.static(1)
    assert measured.predicted_gain is not None and prior.predicted_gain is not None
    assert measured.predicted_gain < prior.predicted_gain


def test_a_collapse_of_acceptance_starts_a_new_regime_in_one_window() -> None:
    """A moderate change of acceptance needs two windows in a row to count as a new
    regime; one that moves E(k) by more than a quarter is the workload's, and starts one
    at once."""
    state = ControllerState.initial(SpecConfig.static(3))
    for tick in range(5):
        state = decide(
            state, _window(60.0 * tick, [4] * 60, alpha=0.5), ONE_K, SETTINGS, 60.0 * tick
        ).state
    # E(3) at alpha 0.5 is 1.875; at 0.4 it is 1.624 (-13 %), at 0.2 1.248 (-33 %)
    moderate = decide(state, _window(300.0, [4] * 60, alpha=0.4), ONE_K, SETTINGS, 300.0)
    assert not moderate.new_regime
    collapse = decide(state, _window(300.0, [4] * 60, alpha=0.2), ONE_K, SETTINGS, 300.0)
    assert collapse.new_regime


def test_a_target_no_config_meets_at_any_past_load_leaves_the_choice_to_throughput() -> None:
    """With a TPOT target below every config's at every load, each config delivers no
    goodput over the service's past regimes either: the mixture rule has nothing to weigh
    and leaves the choice as the policy made it, on throughput (k=3 -> k=1, +15.6 %)."""
    unmeetable = replace(SETTINGS, objective=Objective(ObjectiveKind.GOODPUT, tpot_target_s=1e-6))
    state = replace(
        ControllerState.initial(SpecConfig.static(3)),
        regime_lengths=(600.0, 600.0),
        past_regimes=(
            PastRegime(BatchDistribution.constant(32)),
            PastRegime(BatchDistribution.constant(4)),
        ),
    )
    decision = decide(state, _steady(0), ONE_K, unmeetable, 0)
    assert decision.config == SpecConfig.static(1)
    assert "mixture" not in decision.reason


def test_a_change_that_follows_a_ramp_to_its_end_is_counted_over_the_ramp() -> None:
    """Off at batch 2 after regimes of 600 s falling from 32: k = 2 gains 31 % here and is
    the best k at batch 1, where the fall is heading, in every draw of the near-certain
    step-time posterior, so it keeps its gain until the load turns back: counted over the
    ramp so far (1800 s), not the regime's expected rest (600 s, 186 s of service against
    2 x 100 s of restart). At batch 4 the best, k = 1, is not what batch 1 wants, and a
    later change would follow: counted over the regime."""
    costly = replace(SETTINGS, restart_cost_s=100.0)

    def at(batch: int, *loads: int) -> Decision:
        state = _off_after(ONE_K, *loads)
        return decide(state, _window(0, [batch] * 60, k=0), ONE_K, costly, 0)

    ramp = at(2, 32, 16, 8)
    assert ramp.action is Action.RECONFIGURE and ramp.config == SpecConfig.static(2)
    assert ramp.gain_s is not None and ramp.likely_gain is not None
    assert ramp.gain_s == pytest.approx(ramp.likely_gain * 1800)
    assert "over an expected 1800s of this ramp" in ramp.reason
    # One past regime makes no ramp: the regime's rest does not pay.
    alone = at(2, 8)
    assert alone.action is Action.KEEP and alone.recommended == SpecConfig.static(2)
    assert "over an expected 600s of this regime" in alone.reason
    # On the ramp, but short of where it is heading.
    short = at(4, 32, 16, 8)
    assert short.action is Action.KEEP and short.recommended == SpecConfig.static(1)
