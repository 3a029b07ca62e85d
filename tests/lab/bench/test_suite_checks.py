"""Inputs a run would trip over are refused as BenchError, naming what to fix."""

from pathlib import Path

import pytest
from specops_lab.bench import (
    BenchError,
    FixedPolicy,
    LoadTrace,
    Segment,
    ServiceSpec,
    load_suite,
    run_policy,
    run_suite,
)
from specops_lab.bench._truth_table import truth_table
from specops_lab.sim import load_truth, load_workload

from specops.policy import SpecConfig

FULL = Path(__file__).resolve().parents[3] / "bench" / "full.yaml"


def _workload(tmp_path: Path, prompt: int, output: int) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(
        "name: w\ncomponents:\n  p:\n    kind: parametric\n    network: [0.8, 0.7]\n"
        "    lookup: [0.05]\n"
        f"    prompt_len: {{mean: {prompt}, sigma: 0, max: {prompt}}}\n"
        f"    output_len: {{mean: {output}, sigma: 0, max: {output}}}\n"
    )
    return path


def _trace(workload: str, **mix: float) -> LoadTrace:
    return LoadTrace(
        name="t",
        workload=workload,
        segments=(Segment(duration_s=30, concurrency=4, mix=dict(mix) if mix else None),),
    )


def test_a_bad_prior_acceptance_is_refused_at_load_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"prior_acceptance[\s\S]*position 0"):
        ServiceSpec(prior_acceptance=(1.5, -0.2, 0.9))


def test_an_unknown_method_is_refused_before_any_run() -> None:
    suite, traces = load_suite(FULL)
    bogus = suite.model_copy(
        update={"service": suite.service.model_copy(update={"method": "bogus"})}
    )
    with pytest.raises(BenchError, match=r"service\.method 'bogus'"):
        run_suite(bogus, traces[:1])


def test_segment_mixes_must_fit_the_workload_before_any_run() -> None:
    suite, _ = load_suite(FULL)
    with pytest.raises(BenchError, match=r"trace t: segment mixes [\s\S]*unknown components"):
        run_suite(suite, [_trace("sharegpt", nosuch=1.0)])


def test_a_prompt_beyond_the_model_length_names_the_trace_and_policy(tmp_path: Path) -> None:
    suite, _ = load_suite(FULL)
    trace = _trace(str(_workload(tmp_path, prompt=200_000, output=10)))
    with pytest.raises(BenchError, match=r"trace t on truth .*, policy off: prompt of"):
        run_policy(trace, FixedPolicy("off", SpecConfig.off()), suite.service, suite.controller)


def test_a_workload_that_never_decodes_has_a_truth_table(tmp_path: Path) -> None:
    """One-token answers never draft: no acceptance was measured, none is assumed."""
    table = truth_table(
        load_truth("llama3.1-8b-h100-eagle3"),
        load_workload(str(_workload(tmp_path, prompt=100, output=1))),
        "eagle3",
        k_max=3,
        max_batch=64,
        seed=0,
    )
    assert table.is_off
