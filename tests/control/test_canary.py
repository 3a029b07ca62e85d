"""A change measured on one pod before the fleet follows, against the hand-checkable cost
model of ``test_decide`` (k=3 -> k=1 is predicted +15.6 % at batch 4)."""

from dataclasses import replace

import pytest

from specops.control import (
    Action,
    Canary,
    CanaryVerdict,
    ControlInput,
    ControllerState,
    Mode,
    ReasonCode,
    decide,
)
from specops.control._canary import canary_report
from specops.policy import SpecConfig, StepPoint
from tests.control.test_decide import ONE_K, SETTINGS, _steady

TWO = replace(ONE_K, replicas=2)
K1, K3 = SpecConfig.static(1), SpecConfig.static(3)


def _with_tpot(window: ControlInput, tpot_s: float, canary_tpot_s: float) -> ControlInput:
    canary = replace(_steady(window.window_end, k=1), tpot_s=canary_tpot_s)
    return replace(window, tpot_s=tpot_s, canary=canary)


def _started() -> ControllerState:
    decision = decide(ControllerState.initial(K3), _steady(0), TWO, SETTINGS, 0)
    assert decision.action is Action.CANARY and decision.code is ReasonCode.CANARY_STARTED
    assert decision.config == K3  # the fleet keeps its config
    assert decision.applied and decision.recommended == K1
    assert decision.state.canary is not None and decision.state.canary.config == K1
    assert decision.canary is not None and decision.canary.verdict is CanaryVerdict.RUNNING
    assert decision.state.canary.predicted_gain == pytest.approx(decision.predicted_gain)
    return decision.state


def test_one_replica_changes_the_fleet_and_two_start_a_canary() -> None:
    single = decide(ControllerState.initial(K3), _steady(0), ONE_K, SETTINGS, 0)
    assert single.action is Action.RECONFIGURE and single.state.canary is None
    _started()
    off = replace(SETTINGS, canary=False)
    assert decide(ControllerState.initial(K3), _steady(0), TWO, off, 0).action is Action.RECONFIGURE


def test_a_faster_canary_is_promoted_after_its_windows_and_the_fleet_rolls() -> None:
    state = _started()
    decision = decide(state, _with_tpot(_steady(60), 0.010, 0.008), TWO, SETTINGS, 60)
    assert decision.action is Action.WITHHOLD and decision.code is ReasonCode.CANARY_IN_PROGRESS
    assert decision.state.canary is not None and decision.state.canary.speedups == (1.25,)
    decision = decide(decision.state, _with_tpot(_steady(120), 0.0101, 0.008), TWO, SETTINGS, 120)
    assert decision.action is Action.WITHHOLD  # three windows are needed
    decision = decide(decision.state, _with_tpot(_steady(180), 0.0099, 0.008), TWO, SETTINGS, 180)
    assert decision.action is Action.RECONFIGURE and decision.code is ReasonCode.CANARY_PASSED
    assert decision.config == K1 and decision.state.canary is None
    assert decision.state.rollout is not None and decision.state.rollout.target == K1
    report = decision.canary
    assert report is not None and report.verdict is CanaryVerdict.PROMOTED
    assert report.windows == 3 and report.gain == pytest.approx(0.25, abs=0.01)
    assert report.gain is not None and report.low is not None and report.high is not None
    assert report.low < report.gain < report.high
    assert "measured over 3 windows" in decision.reason


def test_a_slower_canary_is_rolled_back_and_the_fleet_keeps_its_config() -> None:
    state = _started()
    for t in (60, 120, 180):
        decision = decide(state, _with_tpot(_steady(t), 0.010, 0.011), TWO, SETTINGS, t)
        state = decision.state
    assert decision.action is Action.ROLLBACK and decision.code is ReasonCode.CANARY_FAILED
    assert decision.config == K3 and state.canary is None and state.rollout is None
    assert decision.canary is not None and decision.canary.verdict is CanaryVerdict.ROLLED_BACK
    assert decision.canary.gain == pytest.approx(-1 / 11)
    assert state.last_change_at == 180  # the minimum dwell counts from here


def test_a_window_without_a_canary_reading_counts_nothing_until_the_timeout() -> None:
    state = _started()
    decision = decide(state, _steady(60), TWO, SETTINGS, 60)
    assert decision.code is ReasonCode.CANARY_IN_PROGRESS and "no comparison" in decision.reason
    late = SETTINGS.rollout_timeout_s + 1
    decision = decide(decision.state, _steady(late), TWO, SETTINGS, late)
    assert decision.action is Action.ROLLBACK and "gave no reading" in decision.reason


@pytest.mark.parametrize("mode", [Mode.ADVISE, Mode.FIXED, Mode.OFF])
def test_a_mode_that_changes_nothing_takes_the_canary_back(mode: Mode) -> None:
    state = _started()
    window = _with_tpot(_steady(60), 0.010, 0.008)
    decision = decide(state, window, TWO, replace(SETTINGS, mode=mode), 60)
    assert decision.action is Action.ROLLBACK and f"mode {mode.value}" in decision.reason
    one = decide(state, window, ONE_K, SETTINGS, 60)
    assert one.action is Action.ROLLBACK and "one replica" in one.reason


def _point(k: int, end: float) -> StepPoint:
    """1000 steps at batch 4 with k drafts, timed as the test model prices them."""
    batched = 4 * (k + 1)
    return StepPoint(batched, 0.0, k, 4 * k, 1.0, 0.010 + 0.001 * batched, 1000, end)


def test_the_canary_windows_teach_the_step_time_of_its_k() -> None:
    state = _started()
    window = _with_tpot(_steady(60), 0.010, 0.008)
    assert window.canary is not None
    canary = replace(window.canary, cost_points=(_point(1, 59),))
    measured = replace(window, cost_points=(_point(3, 59),), canary=canary)
    decision = decide(state, measured, TWO, SETTINGS, 60)
    evidence = decision.state.cost_evidence
    assert evidence.points == 2 and evidence.ks == (1, 3)


def test_an_undecided_canary_is_rolled_back_after_its_last_window() -> None:
    noisy = Canary(K1, K3, 0.0, 0.1, speedups=(1.2, 0.9, 1.15, 0.92))
    running = canary_report(noisy, windows=3, max_windows=5, min_gain=0.05, confidence=0.8)
    assert running.verdict is CanaryVerdict.RUNNING
    last = replace(noisy, speedups=(*noisy.speedups, 1.1))
    settled = canary_report(last, windows=3, max_windows=5, min_gain=0.05, confidence=0.8)
    assert settled.verdict is CanaryVerdict.ROLLED_BACK
    assert settled.low is not None and settled.high is not None
    assert settled.low < 0.05 < settled.high


def test_after_its_last_window_a_canary_above_no_gain_whose_mean_pays_is_promoted() -> None:
    steady = Canary(K1, K3, 0.0, 0.1, speedups=(1.08, 1.02, 1.07, 1.04))
    report = canary_report(steady, windows=2, max_windows=4, min_gain=0.05, confidence=0.8)
    assert report.verdict is CanaryVerdict.PROMOTED
    assert report.low is not None and 0 < report.low < 0.05 <= (report.gain or 0)
    early = replace(steady, speedups=steady.speedups[:3])
    waiting = canary_report(early, windows=2, max_windows=4, min_gain=0.05, confidence=0.8)
    assert waiting.verdict is CanaryVerdict.RUNNING


def test_a_refuted_canary_is_not_tried_again_until_the_regime_changes() -> None:
    state = _started()
    for t in (60, 120, 180):
        decision = decide(state, _with_tpot(_steady(t), 0.010, 0.011), TWO, SETTINGS, t)
        state = decision.state
    assert state.refuted is not None and state.refuted.config == K1
    later = 180.0 + SETTINGS.min_dwell_s + 60
    again = decide(state, _steady(later), TWO, SETTINGS, later)
    assert again.action is Action.KEEP and again.code is ReasonCode.CANARY_FAILED
    assert "tried again when the regime changes" in again.reason
    assert "-9.1% (" in again.reason  # what it measured, not what was predicted
    # A new regime (a different load, confirmed over two windows) clears it.
    state, now = again.state, later
    while state.refuted is not None:
        now += 60
        state = decide(state, _steady(now, batch=12), TWO, SETTINGS, now).state
        assert now < later + 600
