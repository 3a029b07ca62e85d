"""Per-position acceptance from vLLM's counters when k varies from step to step.

vLLM divides nothing: it counts drafts (``num_drafts``) and accepted tokens at each
position (``num_accepted_tokens_per_pos``). Under a per-batch-size table a step at a
large batch may draft fewer positions than one at a small batch, yet every draft adds to
``num_drafts``, so ``accepted_i / num_drafts`` understates a_i for the positions that
short drafts never reach. The share of drafts that reached position i follows from the
table and the load: a batch of B requests at step time T makes B / T drafts per second.
"""

from __future__ import annotations

from collections.abc import Sequence

from specops.policy._acceptance import AcceptanceCurve
from specops.policy._config import SpecConfig
from specops.policy._cost import StepShape, StepTime
from specops.policy._load import BatchDistribution

__all__ = ["acceptance_from_counters", "draft_reach"]


def draft_reach(
    config: SpecConfig, load: BatchDistribution, cost: StepTime, context_tokens: float
) -> tuple[float, ...]:
    """Share of drafts that proposed a token at position i, for i < the config's cap."""
    reached = [0.0] * config.num_speculative_tokens
    total = 0.0
    for batch, weight in load.weights:
        k = config.k_for_batch(batch)
        if k == 0:
            continue
        step = cost.step_time(StepShape(batch, k, round(batch * context_tokens)))
        rate = weight * batch / step
        total += rate
        for i in range(k):
            reached[i] += rate
    if total == 0:
        return tuple(0.0 for _ in reached)
    return tuple(r / total for r in reached)


def acceptance_from_counters(
    num_drafts: float,
    accepted_per_position: Sequence[float],
    reach: Sequence[float],
) -> AcceptanceCurve:
    """a_i = (accepted_i / num_drafts) / reach_i over the positions some draft reached."""
    reached = 0
    while reached < min(len(reach), len(accepted_per_position)) and reach[reached] > 0:
        reached += 1
    if num_drafts <= 0 or reached == 0:
        raise ValueError("no drafts were observed, acceptance is unknown")
    return AcceptanceCurve.from_counters(
        num_drafts, [accepted_per_position[i] / reach[i] for i in range(reached)]
    )
