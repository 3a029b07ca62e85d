"""Stretches and single steps run the same engine.

``stepping="bulk"`` plans whole stretches of steps and sums them with numpy;
``stepping="single"`` runs every step alone through the scheduler. Both draw the workload's
requests and the step-time noise in the same order, so on the same seeds they are the same
run, not just runs alike in distribution. Tolerance: every count (counters, histogram
buckets, requests, steps) must be equal; sums of seconds (histogram totals, latencies and
their percentiles) may differ by 1e-9 relative, because numpy adds a stretch's values in
another order than one step after another does.
"""

import json
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from specops_lab.sim import (
    EngineConfig,
    EngineMetrics,
    FinishedRequest,
    LengthDistribution,
    MixPhase,
    ParametricComponent,
    SimulatedEngine,
    TraceComponent,
    Workload,
    WorkloadSpec,
    load_truth,
    load_workload,
    parse_speculative_config,
)

TRUTH = load_truth("llama3.1-8b-h100-eagle3")  # step-time noise on: jitter_sigma 0.02
REL = 1e-9
TABLE = [[1, 16, 5], [17, 32, 4], [33, 64, 3], [65, 128, 1], [129, 512, 0]]


def eagle(k: int, table: list[list[int]] | None = None) -> str:
    config: dict[str, object] = {"method": "eagle", "model": "d", "num_speculative_tokens": k}
    if table is not None:
        config["num_speculative_tokens_per_batch_size"] = table
    return json.dumps(config)


def shifting() -> WorkloadSpec:
    """ShareGPT replayed, then from 10 s a parametric workload whose drafts mostly fail."""
    hard = ParametricComponent(
        network=(0.2,),
        prompt_len=LengthDistribution(mean=300, sigma=0.5, max=2000),
        output_len=LengthDistribution(mean=200, sigma=0.5, max=1000),
    )
    return WorkloadSpec(
        name="shift",
        components={"sharegpt": TraceComponent(trace="sharegpt"), "hard": hard},
        phases=(
            MixPhase(start_s=0.0, weights={"sharegpt": 1.0}),
            MixPhase(start_s=10.0, weights={"hard": 1.0}),
        ),
    )


Run = Callable[[SimulatedEngine], None]


def closed_loop(concurrency: int, until: float, scrape_s: float = 2.0) -> Run:
    """A closed loop woken every scrape, as the benchmark drives it."""

    def run(engine: SimulatedEngine) -> None:
        while engine.now < until:
            for _ in range(concurrency - engine.num_running - engine.num_waiting):
                engine.add_request()
            engine.run_until(min(until, engine.now + scrape_s), concurrency=concurrency)

    return run


def engine(
    stepping: str,
    batch: int,
    spec: str | None,
    *,
    workload: WorkloadSpec | None = None,
    kv_tokens: int | None = None,
    track_tokens: bool = False,
) -> SimulatedEngine:
    truth = TRUTH if kv_tokens is None else replace(TRUTH, kv_cache_tokens=kv_tokens)
    return SimulatedEngine(
        Workload(workload or load_workload("sharegpt"), seed=3),
        EngineConfig(max_num_seqs=batch, speculative=parse_speculative_config(spec)),
        truth=truth,
        seed=4,
        stepping=stepping,  # type: ignore[arg-type]
        track_tokens=track_tokens,
    )


def assert_same_metrics(single: EngineMetrics, bulk: EngineMetrics) -> None:
    assert bulk.counters == single.counters
    assert bulk.accepted_per_position == single.accepted_per_position
    assert bulk.labelled == single.labelled
    assert bulk.gauges == single.gauges
    for name, histogram in single.histograms.items():
        assert bulk.histograms[name].cumulative == histogram.cumulative, name
        assert bulk.histograms[name].total == pytest.approx(histogram.total, rel=REL), name


def assert_same_requests(single: list[FinishedRequest], bulk: list[FinishedRequest]) -> None:
    assert single
    assert [r.request_id for r in bulk] == [r.request_id for r in single]
    assert [r.output_tokens for r in bulk] == [r.output_tokens for r in single]
    assert [r.num_preemptions for r in bulk] == [r.num_preemptions for r in single]
    for field in ("tpot", "e2e_latency", "ttft"):
        a = np.array([getattr(r, field) for r in single])
        b = np.array([getattr(r, field) for r in bulk])
        assert b == pytest.approx(a, rel=REL), field
        for q in (50, 90, 99):
            assert np.percentile(b, q) == pytest.approx(np.percentile(a, q), rel=REL), field


def compare(make: Callable[[str], SimulatedEngine], run: Run) -> SimulatedEngine:
    engines = {mode: make(mode) for mode in ("single", "bulk")}
    for e in engines.values():
        run(e)
    single, bulk = engines["single"], engines["bulk"]
    assert bulk.now == pytest.approx(single.now, rel=REL)
    assert (bulk.num_running, bulk.num_waiting) == (single.num_running, single.num_waiting)
    assert_same_metrics(single.metrics(), bulk.metrics())
    assert_same_requests(single.take_finished(), bulk.take_finished())
    return bulk


@pytest.mark.parametrize(
    ("batch", "spec", "seconds"),
    [
        (1, eagle(3), 30.0),
        (32, eagle(3), 20.0),
        (32, eagle(5, TABLE), 20.0),
        (128, None, 10.0),
        (256, eagle(5, TABLE), 10.0),
    ],
    ids=["b1-k3", "b32-k3", "b32-table", "b128-off", "b256-table"],
)
def test_a_closed_loop_is_the_same_run_in_stretches(
    batch: int, spec: str | None, seconds: float
) -> None:
    bulk = compare(lambda mode: engine(mode, batch, spec), closed_loop(batch, seconds))
    assert bulk.metrics().success["stop"] + bulk.metrics().success["length"] > 0


def test_preemptions_under_kv_pressure_are_the_same_in_stretches() -> None:
    bulk = compare(lambda mode: engine(mode, 64, eagle(3), kv_tokens=60_000), closed_loop(64, 15.0))
    assert bulk.metrics().counters["vllm:num_preemptions"] > 50


def test_a_workload_shift_and_a_restart_are_the_same_in_stretches() -> None:
    def run(e: SimulatedEngine) -> None:
        closed_loop(48, 8.0)(e)
        e.restart(parse_speculative_config(eagle(2)), downtime_s=3.0)
        closed_loop(48, 20.0)(e)

    bulk = compare(lambda mode: engine(mode, 48, eagle(4), workload=shifting()), run)
    assert bulk.metrics().counters["vllm:spec_decode_num_drafts"] > 0


@pytest.mark.parametrize("gap_s", [0.05, 2.0], ids=["busy", "idle-between"])
def test_open_loop_arrivals_and_single_steps_are_the_same_in_stretches(gap_s: float) -> None:
    arrivals = np.cumsum(np.random.default_rng(5).exponential(gap_s, size=300 if gap_s < 1 else 40))

    def run(e: SimulatedEngine) -> None:
        for arrival in arrivals.tolist():
            e.run_until(arrival)
            e.add_request(arrival=arrival)
        while e.has_work:
            e.step()

    compare(lambda mode: engine(mode, 64, eagle(3)), run)


def test_steps_report_the_same_tokens_in_stretches() -> None:
    results = {}
    for mode in ("single", "bulk"):
        e = engine(mode, 8, eagle(3), track_tokens=True)
        for _ in range(8):
            e.add_request(max_tokens=64)
        results[mode] = [e.step() for _ in range(60)]
    for single, bulk in zip(results["single"], results["bulk"], strict=True):
        assert (bulk.decode_batch, bulk.prefill_tokens, bulk.k) == (
            single.decode_batch,
            single.prefill_tokens,
            single.k,
        )
        assert sorted(bulk.emitted) == sorted(single.emitted)
        assert [f.request_id for f in bulk.finished] == [f.request_id for f in single.finished]
        assert bulk.end == pytest.approx(single.end, rel=REL)
