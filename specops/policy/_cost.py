"""The step-time cost model: how long one engine step takes for a batch.

T = t_fixed + c_tok * N + c_kv * N_kv + t_draft(k) + t_overhead, with N = B * (k + 1)
batched tokens for B running requests and N_kv the context tokens read. An optional
compute floor (flops_per_token * N / peak_flops) bounds the target forward from below,
the roofline knee the additive fit does not have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "DraftCost",
    "StepCostModel",
    "StepShape",
    "StepTime",
]


@dataclass(frozen=True)
class StepShape:
    """What one step processes: B decoding requests, k drafts each, their contexts.

    ``prefill_tokens`` are prompt tokens computed in the same step (chunked prefill): the
    target forward pays for them like any batched token, the drafter does not. ``table``:
    the step runs under a per-batch-size table, which costs vLLM something besides its k
    (a learned model prices that; the profile's roofline does not know it).
    """

    batch: int
    k: int
    context_tokens: int
    prefill_tokens: int = 0
    table: bool = False

    def __post_init__(self) -> None:
        if min(self.batch, self.k, self.context_tokens, self.prefill_tokens) < 0:
            raise ValueError(f"step shape fields must be >= 0, got {self}")

    @property
    def batched_tokens(self) -> int:
        return self.batch * (self.k + 1) + self.prefill_tokens


class StepTime(Protocol):
    """Anything that prices a step: the profile's model or one learned from measurements.

    A value, hashable as its fields, so equal costs share one speed model's points.
    """

    def step_time(self, shape: StepShape) -> float: ...

    def __hash__(self) -> int: ...


@dataclass(frozen=True)
class DraftCost:
    """Time to propose k tokens for a batch.

    A draft network costs ``t_fixed + c_tok * B * k + c_kv * N_kv``; a lookup method
    (n-gram, suffix) costs ``fraction_of_target`` of the target forward.
    """

    t_fixed: float = 0.0
    c_tok: float = 0.0
    c_kv: float = 0.0
    fraction_of_target: float = 0.0

    def seconds(self, shape: StepShape, target_forward: float) -> float:
        if shape.k == 0 or shape.batch == 0:
            return 0.0
        return (
            self.t_fixed
            + self.c_tok * shape.batch * shape.k
            + self.c_kv * shape.context_tokens
            + self.fraction_of_target * target_forward
        )


@dataclass(frozen=True)
class StepCostModel:
    """Seconds per engine step for one model on one kind of accelerator."""

    t_fixed: float
    c_tok: float
    c_kv: float
    t_overhead: float
    draft: DraftCost
    flops_per_token: float = 0.0
    peak_flops: float = 0.0

    def target_forward(self, shape: StepShape) -> float:
        """The verifying forward pass over B * (k + 1) tokens."""
        linear = self.t_fixed + self.c_tok * shape.batched_tokens + self.c_kv * shape.context_tokens
        if self.peak_flops > 0:
            return max(linear, self.flops_per_token * shape.batched_tokens / self.peak_flops)
        return linear

    def step_time(self, shape: StepShape) -> float:
        """One whole step: target forward, drafting for the next step, fixed overhead."""
        forward = self.target_forward(shape)
        return forward + self.draft.seconds(shape, forward) + self.t_overhead
