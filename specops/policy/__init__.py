"""Pure speculation math: acceptance, step cost, and (built on them) the choice of k."""

from specops.policy._acceptance import AcceptanceCurve, expected_tokens_geometric
from specops.policy._cost import DraftCost, StepCostModel, StepShape

__all__ = [
    "AcceptanceCurve",
    "DraftCost",
    "StepCostModel",
    "StepShape",
    "expected_tokens_geometric",
]
