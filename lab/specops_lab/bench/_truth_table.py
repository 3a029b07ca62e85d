"""The best per-batch-size table on the engine's truth: an oracle baseline, never a belief.

The oracle picks, per segment, the best fixed config in hindsight; one of those configs
must be the table that is best *on the truth*, or a controller could look good against
weak baselines. It is computed from the truth's own step time and the workload's own
acceptance (measured by running the simulated engine at k_max, whose per-position
counters give every a_i), with the mean context the workload's requests have and its
prompts, each computed whole on one step. Nothing here is given to the controller.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from specops.policy import (
    AcceptanceCurve,
    Prompts,
    SpecConfig,
    SpeedModel,
    StepShape,
    best_k_by_batch,
    merge_ranges,
)
from specops.profiles import draft_family
from specops_lab.sim import (
    EngineConfig,
    EngineStep,
    EngineTruth,
    MixPhase,
    SimulatedEngine,
    Workload,
    WorkloadSpec,
    parse_speculative_config,
    run_closed_loop,
)

__all__ = ["truth_table", "workload_acceptance"]

_PROBE_BATCH = 16
_PROBE_REQUESTS = 96


class _TruthCost:
    """The truth's step time for a step under a per-batch-size table (its costs included)."""

    def __init__(self, truth: EngineTruth, method: str) -> None:
        self._truth = truth
        self._family = draft_family(method)

    def step_time(self, shape: StepShape) -> float:
        return self._truth.step_time(
            EngineStep(
                batch=shape.batch,
                k=shape.k,
                context_tokens=shape.context_tokens,
                # A whole prompt in one chunk attends to itself: its context is its length.
                prefill_tokens=shape.prefill_tokens,
                prefill_context_tokens=shape.prefill_tokens,
                table=True,
                speculative=True,
                family=self._family,
            )
        )


def _mixed(workload: WorkloadSpec, mix: Mapping[str, float] | None) -> WorkloadSpec:
    if mix is None:
        return workload
    return WorkloadSpec(
        name=workload.name,
        components=workload.components,
        phases=(MixPhase(start_s=0.0, weights=dict(mix)),),
    )


def workload_acceptance(
    truth: EngineTruth,
    workload: WorkloadSpec,
    method: str,
    k_max: int,
    seed: int,
    mix: Mapping[str, float] | None = None,
) -> tuple[AcceptanceCurve, float, Prompts]:
    """The workload's per-position acceptance, mean context and prompts, as the engine
    measures them."""
    text = json.dumps({"method": method, "model": "draft", "num_speculative_tokens": k_max})
    engine = SimulatedEngine(
        Workload(_mixed(workload, mix), seed=seed),
        EngineConfig(max_num_seqs=_PROBE_BATCH, speculative=parse_speculative_config(text)),
        truth=truth,
        seed=seed,
    )
    run_closed_loop(engine, _PROBE_BATCH, requests=_PROBE_REQUESTS)
    metrics = engine.metrics()
    drafts = metrics.counters["vllm:spec_decode_num_drafts"]
    # Requests of one token never decode: nothing was drafted, so nothing is accepted.
    rates = [
        min(max(n / drafts, 0.0), 1.0) if drafts else 0.0 for n in metrics.accepted_per_position
    ]
    for i in range(1, len(rates)):
        rates[i] = min(rates[i], rates[i - 1])
    prompt = metrics.histograms["vllm:request_prompt_tokens"]
    output = metrics.histograms["vllm:request_generation_tokens"]
    context = prompt.total / prompt.count + output.total / output.count / 2
    prompts = Prompts(prompt.total / output.total, prompt.total / prompt.count)
    return AcceptanceCurve(tuple(rates)), context, prompts


def truth_table(
    truth: EngineTruth,
    workload: WorkloadSpec,
    method: str,
    *,
    k_max: int,
    max_batch: int,
    seed: int,
    mix: Mapping[str, float] | None = None,
) -> SpecConfig:
    """The best k at every batch size on the truth, as one vLLM table (or one k, or off)."""
    acceptance, context, prompts = workload_acceptance(truth, workload, method, k_max, seed, mix)
    model = SpeedModel(_TruthCost(truth, method), acceptance, context, prompts)
    ranges = merge_ranges(best_k_by_batch(model, range(k_max + 1), max_batch))
    if len(ranges) == 1:
        return SpecConfig.static(ranges[0].k)
    return SpecConfig(max(r.k for r in ranges), ranges)
