"""Summing series into snapshots, and increases across restarts and gaps."""

import math

import pytest

from specops.observation import (
    Counter,
    Gauge,
    Hist,
    Reading,
    Series,
    Snapshot,
    interval_between,
    intervals_of,
    parse_exposition,
    snapshot_from_reading,
)

from .fake_vllm import FakeVllm


def snapshot_of(engine: FakeVllm, t: float) -> Snapshot:
    return snapshot_from_reading(parse_exposition(engine.page(), t))


def test_engines_are_summed_and_kv_usage_averaged() -> None:
    engine = FakeVllm(k=2, engines=2)
    engine.draft(10, [8, 5], engine=0)
    engine.draft(30, [20, 10], engine=1)
    engine.load(running=4, waiting=1, kv=0.2, engine=0)
    engine.load(running=6, waiting=0, kv=0.6, engine=1)
    engine.steps([12, 12], engine=1)
    snap = snapshot_of(engine, 1.0)
    assert snap.engines == 2
    assert snap.counters[Counter.DRAFTS] == 40
    assert snap.counters[Counter.DRAFT_TOKENS] == 80
    assert snap.accepted_per_position == (28, 15)
    assert snap.gauges[Gauge.RUNNING] == 10
    assert snap.gauges[Gauge.KV_CACHE_USAGE] == pytest.approx(0.4)
    iteration = snap.histograms[Hist.ITERATION_TOKENS]
    assert (iteration.count, iteration.total) == (2, 24)
    assert iteration.bounds[-1] == math.inf


def test_the_kv_pool_is_read_from_each_engines_cache_config() -> None:
    """cache_config_info's labels say how many blocks of how many tokens each engine sized;
    an engine still profiling (num_gpu_blocks "None") or a page without it says nothing."""
    snap = snapshot_of(FakeVllm(engines=2, kv_blocks=1_000), 1.0)
    assert snap.kv_capacity_tokens == 16_000
    info = "vllm:cache_config_info"
    sizing = _reading(
        1.0,
        (info, {"engine": "0", "block_size": "16", "num_gpu_blocks": "None"}, 1.0),
        (info, {"engine": "1", "block_size": "32", "num_gpu_blocks": "100"}, 1.0),
    )
    assert snapshot_from_reading(sizing).kv_capacity_tokens == 3_200
    profiling = _reading(1.0, (info, {"block_size": "16", "num_gpu_blocks": "None"}, 1.0))
    assert snapshot_from_reading(profiling).kv_capacity_tokens is None
    page = _reading(1.0, ("vllm:num_requests_running", {}, 4.0))
    assert snapshot_from_reading(page).kv_capacity_tokens is None


def _reading(t: float, *series: tuple[str, dict[str, str], float]) -> Reading:
    return Reading(t, [Series(n, labels, v) for n, labels, v in series])


def test_nan_and_gapped_positions_read_as_missing() -> None:
    snap = snapshot_from_reading(
        _reading(
            1.0,
            ("vllm:num_requests_running", {}, math.nan),
            ("vllm:spec_decode_num_drafts_total", {}, math.inf),
            ("vllm:spec_decode_num_accepted_tokens_per_pos_total", {"position": "0"}, 5),
            ("vllm:spec_decode_num_accepted_tokens_per_pos_total", {"position": "2"}, 1),
        )
    )
    assert Gauge.RUNNING not in snap.gauges
    assert Counter.DRAFTS not in snap.counters
    assert snap.accepted_per_position == ()


def test_increase_between_readings() -> None:
    engine = FakeVllm(k=2)
    engine.draft(10, [8, 5])
    before = snapshot_of(engine, 10.0)
    engine.draft(20, [15, 9])
    engine.steps([8] * 4)
    interval = interval_between(before, snapshot_of(engine, 25.0))
    assert not interval.reset
    assert interval.seconds == 15.0
    assert interval.counters[Counter.DRAFTS] == 20
    assert interval.accepted_per_position == (15, 9)
    assert interval.histograms[Hist.ITERATION_TOKENS].count == 4


def test_a_restart_counts_the_new_values_from_zero() -> None:
    old = FakeVllm(k=2)
    old.draft(1000, [800, 500])
    before = snapshot_of(old, 10.0)
    restarted = FakeVllm(k=2)
    restarted.draft(40, [30, 20])
    interval = interval_between(before, snapshot_of(restarted, 25.0))
    assert interval.reset
    assert interval.counters[Counter.DRAFTS] == 40
    assert interval.accepted_per_position == (30, 20)


def test_a_series_missing_on_one_side_is_left_out_of_the_interval() -> None:
    before = snapshot_from_reading(_reading(0.0, ("vllm:generation_tokens_total", {}, 5)))
    after = snapshot_from_reading(
        _reading(
            15.0,
            ("vllm:generation_tokens_total", {}, 50),
            ("vllm:spec_decode_num_drafts_total", {}, 9),
        )
    )
    interval = interval_between(before, after)
    assert interval.counters == {Counter.GENERATION_TOKENS: 45}


def test_intervals_skip_readings_that_are_not_newer() -> None:
    snaps = [
        snapshot_from_reading(_reading(t, ("vllm:generation_tokens_total", {}, v)))
        for t, v in ((0.0, 1), (15.0, 4), (15.0, 4), (30.0, 10))
    ]
    assert [(i.start, i.end) for i in intervals_of(snaps)] == [(0.0, 15.0), (15.0, 30.0)]
