"""A named performance profile: how fast the controller believes one model runs on one GPU.

The controller predicts with a profile's StepCostModel. The simulated engine does not: its
physics is an engine truth (``specops_lab.sim.load_truth``), so a controller is graded on a world
its beliefs only approximate.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from specops.policy import StepCostModel

__all__ = [
    "LOOKUP_METHODS",
    "PRIOR_ACCEPTANCE",
    "DraftFamily",
    "PerformanceProfile",
    "draft_family",
]

# Methods that propose by looking up earlier tokens: no draft network, no draft weights.
LOOKUP_METHODS: frozenset[str] = frozenset({"ngram", "ngram_gpu", "suffix"})


class DraftFamily(StrEnum):
    """How a method drafts: a network forward (EAGLE, MTP, a draft model) or a lookup."""

    NETWORK = "network"
    LOOKUP = "lookup"


# Per-position acceptance a_1..a_7 before anything is measured, from the published
# ShareGPT replay of Llama-3.1-8B (mean tokens per step by k, the calibration README):
# a_i = E(i) - E(i - 1), the k = 6, 7 share split evenly. A prior only: measured drafts
# replace it, and with none it lets a service that starts with speculation off judge
# whether turning it on pays.
PRIOR_ACCEPTANCE: dict[DraftFamily, tuple[float, ...]] = {
    DraftFamily.NETWORK: (0.647, 0.390, 0.241, 0.158, 0.106, 0.065, 0.065),
    DraftFamily.LOOKUP: (0.162, 0.078, 0.046, 0.030, 0.022, 0.015, 0.015),
}


def draft_family(method: str) -> DraftFamily:
    """The family of a canonical vLLM method name (eagle, eagle3, mtp, ngram, suffix, ...)."""
    return DraftFamily.LOOKUP if method in LOOKUP_METHODS else DraftFamily.NETWORK


@dataclass(frozen=True)
class PerformanceProfile:
    """Step-cost models per draft family plus the memory and compute facts around them.

    ``network`` and ``lookup`` share the target-forward terms and differ in the draft
    term. ``kv_cache_tokens`` is the KV capacity with no draft loaded;
    ``draft_memory_kv_tokens`` is what a draft network's weights and its own KV take
    from it, in target KV tokens. ``params`` and ``peak_flops`` (the sustained rate the
    per-token slope implies) give the roofline alternative to the additive fit: with
    ``roofline=True`` the target forward is ``max(t_fixed + c_kv * N_kv, 2 * params * N /
    peak_flops)``, memory time or compute time, whichever binds, instead of their sum.
    """

    name: str
    model: str
    accelerator: str
    tensor_parallel_size: int
    network: StepCostModel
    lookup: StepCostModel
    kv_cache_tokens: int
    draft_memory_kv_tokens: int
    params: float
    peak_flops: float
    description: str
    gpu: str | None = None
    """The GPU's name in ``data/gpus.toml``, which ``spec.engine.gpu`` names."""
    draft_pass_s: float = 0.0
    """One sequential pass of the draft network: its weights read once per GPU at the
    bandwidth the target's fixed term implies. A method that drafts one position a pass
    pays it k times a step; the published fits price drafting as one fixed cost, so the
    step-time prior takes this term from here (:func:`specops.policy.cost_prior`)."""

    def cost_model(self, method: str | None, *, roofline: bool = False) -> StepCostModel:
        """The step-cost model for a speculative method (None: no speculation)."""
        base = self.lookup if method is not None and method in LOOKUP_METHODS else self.network
        if not roofline:
            return base
        return StepCostModel(
            t_fixed=base.t_fixed,
            c_tok=0.0,
            c_kv=base.c_kv,
            t_overhead=base.t_overhead,
            draft=base.draft,
            flops_per_token=2.0 * self.params,
            peak_flops=self.peak_flops,
        )

    def kv_capacity(self, method: str | None) -> int:
        """KV-cache tokens left for requests once the draft (if any) is loaded."""
        if method is None or method in LOOKUP_METHODS:
            return self.kv_cache_tokens
        return self.kv_cache_tokens - self.draft_memory_kv_tokens
