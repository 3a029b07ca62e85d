"""The fidelity check prices each measured interval's mean step on the truth: in virtual
time (the engine is the truth) the ratio is one, and a slower engine shows by its factor."""

from __future__ import annotations

import json

import pytest
from specops_lab.demo import EngineInterval, check_steps
from specops_lab.sim import (
    EngineConfig,
    SimulatedEngine,
    Workload,
    load_truth,
    load_workload,
    parse_speculative_config,
)

TRUTH = load_truth("llama3.1-8b-h200-eagle3")
_COUNTERS = (
    "vllm:generation_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:prompt_tokens",
)


def _intervals(
    concurrency: int, k: int, *, slowdown: float = 1.0, seconds: float = 60.0, every: float = 2.0
) -> list[EngineInterval]:
    """A closed loop at ``concurrency`` on the engine in virtual time, read every ``every``
    seconds as Prometheus would read its counters and gauges."""
    config = (
        parse_speculative_config(
            json.dumps({"method": "eagle3", "model": "d", "num_speculative_tokens": k})
        )
        if k
        else None
    )
    engine = SimulatedEngine(
        Workload(load_workload("sharegpt"), seed=1),
        EngineConfig(max_num_seqs=256, speculative=config),
        truth=TRUTH,
        seed=1,
        slowdown=slowdown,
    )

    def read() -> tuple[float, list[float], float, float]:
        metrics = engine.metrics()
        counters = [metrics.counters.get(name, 0.0) for name in _COUNTERS]
        steps = float(metrics.histograms["vllm:iteration_tokens_total"].count)
        gauges = metrics.gauges
        return (
            steps,
            counters,
            gauges["vllm:num_requests_running"],
            gauges["vllm:kv_cache_usage_perc"],
        )

    out: list[EngineInterval] = []
    previous = read()
    at = 0.0
    while at < seconds:
        at += every
        while engine.now < at:
            while engine.num_running + engine.num_waiting < concurrency:
                engine.add_request()
            engine.run_until(min(at, engine.now + 0.05))
        now = read()
        steps = (now[0] - previous[0]) / every
        rates = [(b - a) / every for a, b in zip(previous[1], now[1], strict=True)]
        if at > 10.0:  # past the first prefills
            out.append(
                EngineInterval(
                    end=at,
                    steps_per_s=steps,
                    generated_per_s=rates[0],
                    accepted_per_s=rates[1],
                    drafts_per_s=rates[2],
                    draft_tokens_per_s=rates[3],
                    prompt_tokens_per_s=rates[4],
                    running=(previous[2] + now[2]) / 2,
                    kv_usage=(previous[3] + now[3]) / 2,
                    busy=min(previous[2], now[2]) > 0,
                )
            )
        previous = now
    return out


@pytest.mark.parametrize(("concurrency", "k"), [(4, 5), (200, 0), (100, 3)])
def test_the_truth_predicts_its_own_engine(concurrency: int, k: int) -> None:
    fidelity = check_steps(_intervals(concurrency, k), TRUTH, lambda _: "day", 2.0)
    assert fidelity.intervals > 10
    assert fidelity.ks() == (k,)
    ratio = fidelity.ratio()
    assert ratio is not None and ratio == pytest.approx(1.0, abs=0.05)
    batch = fidelity.mean("batch")
    assert batch is not None and batch == pytest.approx(concurrency, rel=0.15)


def test_a_slower_engine_shows_by_its_factor_per_phase() -> None:
    intervals = _intervals(32, 3, slowdown=1.3)
    fidelity = check_steps(intervals, TRUTH, lambda at: "early" if at < 35 else "late", 2.0)
    for phase in (None, "early", "late"):
        ratio = fidelity.ratio(phase)
        assert ratio is not None and ratio == pytest.approx(1.3, abs=0.07)
    assert fidelity.ratio("night") is None


def test_idle_and_prefill_only_intervals_are_left_out() -> None:
    busy = _intervals(8, 3, seconds=14.0)[0]
    idle = EngineInterval(**{**busy.__dict__, "busy": False})
    nothing = EngineInterval(**{**busy.__dict__, "steps_per_s": 0.0})
    prefill = EngineInterval(**{**busy.__dict__, "generated_per_s": 0.0, "accepted_per_s": 0.0})
    fidelity = check_steps([busy, idle, nothing, prefill], TRUTH, lambda _: "day", 2.0)
    assert fidelity.intervals == 1
