import json
from dataclasses import replace

import numpy as np
import pytest
from specops_lab.sim import (
    EngineConfig,
    EngineStep,
    LengthDistribution,
    ParametricComponent,
    SimulatedEngine,
    Workload,
    WorkloadSpec,
    k_lookup_table,
    load_trace_set,
    load_truth,
    load_workload,
    parse_speculative_config,
    replay,
    run_closed_loop,
)

from specops.errors import EngineConfigError
from specops.policy import AcceptanceCurve
from specops.profiles import DraftFamily

TRUTH = load_truth("llama3.1-8b-h100-eagle3")
CONDITIONAL = (0.8, 0.7, 0.6, 0.5)


def eagle(k: int, **extra: object) -> str:
    return json.dumps({"method": "eagle", "model": "draft", "num_speculative_tokens": k, **extra})


def parametric_workload(output: int = 400) -> Workload:
    component = ParametricComponent(
        network=CONDITIONAL,
        prompt_len=LengthDistribution(mean=200),
        output_len=LengthDistribution(mean=output, sigma=0.3),
    )
    return Workload(WorkloadSpec(name="p", components={"a": component}), seed=1)


def engine(spec: str | None, workload: Workload | None = None, **config: object) -> SimulatedEngine:
    return SimulatedEngine(
        workload or parametric_workload(),
        EngineConfig(speculative=parse_speculative_config(spec), **config),  # type: ignore[arg-type]
        truth=replace(TRUTH, jitter_sigma=0.0),
    )


def test_k_lookup_matches_vllm_dense_schedule() -> None:
    table = k_lookup_table([(1, 16, 3), (32, 128, 2)], max_num_seqs=200, num_speculative_tokens=5)
    assert table[1] == table[16] == 3
    assert table[17] == table[31] == 3  # a gap carries the previous k
    assert table[32] == table[128] == table[200] == 2  # and so does the tail
    capped = k_lookup_table([(1, 8, 7), (9, 64, 0)], max_num_seqs=64, num_speculative_tokens=4)
    assert capped[8] == 4 and capped[9] == 0 and len(capped) == 65


def test_per_step_k_follows_the_schedule_by_scheduled_requests() -> None:
    sim = engine(eagle(4, num_speculative_tokens_per_batch_size=[[1, 4, 4], [5, 1024, 0]]))
    ids = [sim.add_request() for _ in range(8)]
    ks = {(result.decode_batch, result.k) for result in (sim.step() for _ in range(40))}
    assert all(k == 0 for batch, k in ks if batch > 4)
    before = sim.metrics().counters["vllm:spec_decode_num_drafts"]
    assert before == 0
    for request_id in ids[:6]:
        assert sim.abort(request_id)
    result = sim.step()
    assert (result.decode_batch, result.k) == (2, 4)


def test_step_time_is_the_truths() -> None:
    sim = engine(eagle(3))
    sim.add_request(prompt_tokens=100, max_tokens=50, ignore_eos=True)
    prefill = sim.step()
    shape = EngineStep(0, 0, 0, prefill_tokens=100, prefill_context_tokens=100, speculative=True)
    assert prefill.end - prefill.start == pytest.approx(sim.truth.step_time(shape))
    decode = sim.step()
    shape = EngineStep(1, 3, 101, speculative=True, family=DraftFamily.NETWORK)
    assert decode.end - decode.start == pytest.approx(sim.truth.step_time(shape))


def test_mean_acceptance_length_in_metrics_is_the_workloads() -> None:
    sim = engine(eagle(3), max_num_seqs=64)
    run_closed_loop(sim, 64, requests=400)
    expected = AcceptanceCurve(tuple(np.cumprod(CONDITIONAL))).expected_tokens(3)
    metrics = sim.metrics()
    assert metrics.mean_acceptance_length == pytest.approx(expected, rel=0.01)
    drafts = metrics.counters["vllm:spec_decode_num_drafts"]
    per_position = np.asarray(metrics.accepted_per_position) / drafts
    assert per_position == pytest.approx(np.cumprod(CONDITIONAL)[:3], abs=0.01)


def test_trace_replay_in_the_engine_matches_the_trace_set() -> None:
    sim = engine(eagle(3), Workload(load_workload("gsm8k"), seed=2), max_num_seqs=32)
    run_closed_loop(sim, 32, requests=600)
    traces = load_trace_set("gsm8k").network
    emitted, steps = np.sum([replay(t, 3) for t in traces], axis=0)
    assert sim.metrics().mean_acceptance_length == pytest.approx(emitted / steps, rel=0.02)


def test_counters_only_grow_and_tokens_add_up() -> None:
    sim = engine(eagle(2), max_num_seqs=16)
    for _ in range(40):
        sim.add_request()
    previous = sim.metrics()
    while sim.has_work:
        sim.step()
        current = sim.metrics()
        for name, value in current.counters.items():
            assert value >= previous.counters[name], name
        for name, hist in current.histograms.items():
            assert hist.count >= previous.histograms[name].count, name
        previous = current
    finished = sim.take_finished()
    assert len(finished) == 40
    assert previous.counters["vllm:generation_tokens"] == sum(f.output_tokens for f in finished)
    assert previous.histograms["vllm:iteration_tokens_total"].total == (
        previous.counters["vllm:prompt_tokens"] + previous.counters["vllm:generation_tokens"]
    )
    assert previous.success["stop"] + previous.success["length"] == 40
    assert previous.gauges["vllm:num_requests_running"] == 0


@pytest.mark.parametrize("stepping", ["single", "bulk"])
def test_a_request_an_empty_cache_cannot_hold_is_refused_not_waited_for(stepping: str) -> None:
    """It would wait at the head of the queue for ever, the clock running on empty steps."""
    small = replace(TRUTH, kv_cache_tokens=150, draft=replace(TRUTH.draft, kv_tokens=0))
    sim = SimulatedEngine(
        parametric_workload(),
        EngineConfig(speculative=parse_speculative_config(eagle(3))),
        truth=small,
        stepping=stepping,  # type: ignore[arg-type]
    )
    sim.add_request(prompt_tokens=100, max_tokens=4)
    sim.add_request(prompt_tokens=400, max_tokens=4)
    with pytest.raises(EngineConfigError, match="needs 404 KV-cache tokens to start and the whole"):
        sim.run_until(60.0)
    assert len(sim.take_finished()) == 1


def test_kv_pressure_preempts_and_every_request_still_finishes() -> None:
    tiny = replace(TRUTH, kv_cache_tokens=8000, draft=replace(TRUTH.draft, kv_tokens=0))
    sim = SimulatedEngine(
        parametric_workload(output=600),
        EngineConfig(speculative=parse_speculative_config(eagle(3))),
        truth=tiny,
    )
    for _ in range(30):
        sim.add_request(max_tokens=600, ignore_eos=True)
    peak = 0.0
    while sim.has_work:
        sim.step()
        peak = max(peak, sim.metrics().gauges["vllm:kv_cache_usage_perc"])
    finished = sim.take_finished()
    metrics = sim.metrics()
    assert metrics.counters["vllm:num_preemptions"] > 0
    # Recomputing a preempted request's prompt is never observed again.
    assert metrics.histograms["vllm:iteration_tokens_total"].total == (
        metrics.counters["vllm:prompt_tokens"] + metrics.counters["vllm:generation_tokens"]
    )
    assert sorted(f.output_tokens for f in finished) == [600] * 30
    assert 0.9 < peak <= 1.0
    assert any(f.num_preemptions for f in finished)


def test_restart_requeues_work_and_serves_nothing_while_loading() -> None:
    sim = engine(eagle(3))
    for _ in range(4):
        sim.add_request(max_tokens=2000, ignore_eos=True)
    sim.run_until(1.0)
    sim.restart(parse_speculative_config(None), downtime_s=30.0)
    assert sim.num_running == 0 and sim.num_waiting == 4
    result = sim.step()
    assert result.start == pytest.approx(31.0, abs=0.05)
    assert result.k == 0
    sim.run_until(200.0)
    assert [f.output_tokens for f in sim.take_finished()] == [2000] * 4


def test_lengths_follow_max_tokens_and_ignore_eos() -> None:
    sim = engine(None)
    sim.add_request("cut", max_tokens=5)
    sim.add_request("exact", max_tokens=7, ignore_eos=True)
    sim.run_until(10.0)
    finished = {f.request_id: f for f in sim.take_finished()}
    assert (finished["cut"].output_tokens, finished["cut"].finish_reason) == (5, "length")
    assert (finished["exact"].output_tokens, finished["exact"].finish_reason) == (7, "length")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"method": "eagle", "model": "d", "num_speculative_tokens": 3, "bogus": 1}', "bogus"),
        ('{"method": "medusa2", "num_speculative_tokens": 3}', "method"),
        ('{"method": "eagle", "model": "d", "num_speculative_tokens": 0}', "num_speculative"),
        (
            '{"method": "eagle", "model": "d", "num_speculative_tokens": 3,'
            ' "num_speculative_tokens_per_batch_size": [[2, 8, 3]]}',
            "start at 1",
        ),
        ('{"method": "ngram", "prompt_lookup_max": 4}', "num_speculative_tokens"),
        ("{not json", "JSON"),
    ],
)
def test_bad_speculative_config_is_refused_naming_the_key(text: str, key: str) -> None:
    with pytest.raises(EngineConfigError, match=key):
        parse_speculative_config(text)
