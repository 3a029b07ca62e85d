"""Readings no engine produces are named and left out; the controller holds and says why."""

import math
from collections.abc import Callable, Sequence

from specops.control import (
    Action,
    ControllerState,
    ControlSettings,
    ReasonCode,
    decide,
    service_window,
)
from specops.observation import (
    EstimateStatus,
    PodObservation,
    Reading,
    Series,
    Snapshot,
    observe,
    parse_exposition,
    snapshot_from_reading,
)
from specops.policy import SpecConfig

from .fake_vllm import FakeVllm
from .test_observe import SOURCE, config, drive

Edit = Callable[[int, Series], float]


def _readings(edit: Edit, count: int = 8) -> list[Snapshot]:
    """A healthy engine's readings at k=3, 15 s apart, each value passed through ``edit``."""
    engine = FakeVllm(k=3)
    engine.load(running=8)
    pages = [engine.page()]
    for _ in range(count - 1):
        drive(engine, [8])  # one 15 s interval at batch 8
        pages.append(engine.page())
    snaps = []
    for i, page in enumerate(pages):
        reading = parse_exposition(page, 15.0 * i)
        edited = [Series(s.name, s.labels, edit(i, s)) for s in reading.series]
        snaps.append(snapshot_from_reading(Reading(reading.timestamp, edited)))
    return snaps


def _pod(snaps: Sequence[Snapshot]) -> PodObservation:
    return observe(snaps, now=snaps[-1].timestamp, config=config(), source=SOURCE)


def _unchanged(_: int, s: Series) -> float:
    return s.value


def test_healthy_readings_are_valid() -> None:
    pod = _pod(_readings(_unchanged))
    assert pod.status is EstimateStatus.OK and pod.problems == []


def _held(pod: PodObservation) -> str:
    """The controller's decision on this one pod: it must hold, and it says why."""
    window = service_window(
        [pod],
        (),
        window_s=300.0,
        in_force=SpecConfig.static(3),
        now=pod.observed_at,
        pods_ready=True,
    )
    assert not window.available and window.reason == "MetricsImpossible"
    state = ControllerState.initial(SpecConfig.static(3))
    decision = decide(state, window.control_input, None, ControlSettings(), pod.observed_at)
    assert decision.action is Action.WITHHOLD
    assert decision.code is ReasonCode.METRICS_UNAVAILABLE
    assert decision.config == SpecConfig.static(3)
    return decision.reason


def test_a_negative_gauge_is_named_and_the_controller_holds() -> None:
    def negative_running(i: int, s: Series) -> float:
        return -4.0 if i == 5 and s.name == "vllm:num_requests_running" else s.value

    pod = _pod(_readings(negative_running))
    assert pod.status is EstimateStatus.INVALID
    assert pod.problems == ["vllm:num_requests_running is negative (-4)"]
    assert all(w.acceptance.status is EstimateStatus.UNKNOWN for w in pod.windows)
    reason = _held(pod)
    assert "p-0: impossible readings (vllm:num_requests_running is negative (-4))" in reason


def test_counters_that_go_down_every_scrape_are_not_restarts() -> None:
    def falling(i: int, s: Series) -> float:
        return s.value * 0.3**i if s.name.endswith("_total") else s.value

    pod = _pod(_readings(falling))
    assert pod.status is EstimateStatus.INVALID
    expected = "counters went down in 6 of 7 intervals, twice in a row"
    assert any(expected in p for p in pod.problems), pod.problems
    assert "counters went down" in _held(pod)


def test_one_restart_is_believed_and_a_service_may_fall_twice_in_a_row() -> None:
    def restarted(i: int, s: Series) -> float:
        return s.value / 10 if s.name.endswith("_total") and i >= 4 else s.value

    assert _pod(_readings(restarted)).status is EstimateStatus.OK

    def twice(i: int, s: Series) -> float:  # down at reading 3, down again at reading 4
        scale = {3: 0.1, 4: 0.01}.get(i, 1.0) if s.name.endswith("_total") else 1.0
        return s.value * scale

    snaps = _readings(twice)
    assert _pod(snaps).status is EstimateStatus.INVALID
    # a service's sum over its pods falls as a rolling update replaces them one by one
    service = observe(snaps, now=snaps[-1].timestamp, config=config(pod=None), source=SOURCE)
    assert service.status is EstimateStatus.OK, service.problems


def test_a_nan_counter_is_named_not_read_as_no_drafts() -> None:
    def nan_drafts(i: int, s: Series) -> float:
        return math.nan if i == 6 and s.name == "vllm:spec_decode_num_drafts_total" else s.value

    pod = _pod(_readings(nan_drafts))
    assert pod.problems == ["vllm:spec_decode_num_drafts_total is nan"]
    _held(pod)


def test_more_accepted_than_drafted_is_impossible() -> None:
    def inflated(i: int, s: Series) -> float:
        accepted = s.name == "vllm:spec_decode_num_accepted_tokens_total"
        return s.value * 10 if accepted and i >= 4 else s.value

    pod = _pod(_readings(inflated))
    assert pod.status is EstimateStatus.INVALID
    assert "accepted but only" in pod.problems[0], pod.problems
    _held(pod)


def test_a_later_position_accepted_more_often_is_impossible() -> None:
    def inverted(i: int, s: Series) -> float:
        late = s.name.endswith("_per_pos_total") and s.labels.get("position") == "2"
        return s.value * 3 if late and i >= 3 else s.value

    pod = _pod(_readings(inverted))
    assert any("a draft stops at its first rejection" in p for p in pod.problems), pod.problems
    _held(pod)


def test_a_kv_usage_above_the_whole_pool_is_impossible() -> None:
    def overfull(i: int, s: Series) -> float:
        return 3.5 if i == 7 and s.name == "vllm:kv_cache_usage_perc" else s.value

    pod = _pod(_readings(overfull))
    assert pod.problems == ["vllm:kv_cache_usage_perc is 3.5, above 1 (a fraction of the pool)"]


def test_an_impossible_reading_leaves_the_window_once_it_is_older_than_every_window() -> None:
    def early_negative(i: int, s: Series) -> float:
        return -1.0 if i == 0 and s.name == "vllm:num_requests_waiting" else s.value

    snaps = _readings(early_negative, count=30)  # 29 intervals of 15 s: 435 s, past 300 s
    assert _pod(snaps).status is EstimateStatus.OK
    assert _pod(snaps[:10]).status is EstimateStatus.INVALID
