"""The truth's own best table prices what the workload's steps carry, prompts included."""

from __future__ import annotations

from specops_lab.bench._truth_table import _TruthCost, workload_acceptance
from specops_lab.sim import load_truth, load_workload

from specops.policy import StepShape

TRUTH = "llama3.1-8b-h100-eagle3"


def test_a_step_that_takes_a_prompt_costs_the_truth_its_prefill() -> None:
    cost = _TruthCost(load_truth(TRUTH), "eagle3")
    decode = StepShape(64, 1, 64 * 1000)
    with_prompt = StepShape(64, 1, 64 * 1000, prefill_tokens=1000)
    assert cost.step_time(with_prompt) > 1.5 * cost.step_time(decode)


def test_the_workload_prompts_are_measured_as_the_engine_counts_them() -> None:
    _, context, prompts = workload_acceptance(
        load_truth(TRUTH), load_workload("sharegpt"), "eagle3", 3, seed=1
    )
    # ShareGPT's prompts are shorter than its answers, and a request's context holds both.
    assert 0.0 < prompts.per_output_token < 1.0
    assert 0.0 < prompts.mean_tokens < context
