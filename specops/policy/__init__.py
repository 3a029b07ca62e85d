"""Pure speculation math: acceptance, step cost, the load, and the choice of k or table."""

from specops.policy._acceptance import AcceptanceCurve, expected_tokens_geometric
from specops.policy._choice import (
    Crossover,
    Objective,
    ObjectiveKind,
    PointEstimate,
    PolicyChoice,
    PolicyInput,
    Prediction,
    SpeedModel,
    best_k_by_batch,
    choose,
    crossovers,
    merge_ranges,
    predict,
    relative_gain,
    speed_model,
)
from specops.policy._config import ScheduleRange, SpecConfig
from specops.policy._cost import DraftCost, StepCostModel, StepShape, StepTime
from specops.policy._crossing import draw_crossovers
from specops.policy._learn import (
    TERMS,
    CostEvidence,
    CostPosterior,
    CostPrior,
    LearnedCost,
    StepPoint,
    cost_prior,
)
from specops.policy._load import BatchDistribution
from specops.policy._measure import acceptance_from_counters, draft_reach
from specops.policy._prompts import Prompts
from specops.policy._spread import TpotHistogram, TpotSpread, acceptance_sensitivity, share_within

__all__ = [
    "TERMS",
    "AcceptanceCurve",
    "BatchDistribution",
    "CostEvidence",
    "CostPosterior",
    "CostPrior",
    "Crossover",
    "DraftCost",
    "LearnedCost",
    "Objective",
    "ObjectiveKind",
    "PointEstimate",
    "PolicyChoice",
    "PolicyInput",
    "Prediction",
    "Prompts",
    "ScheduleRange",
    "SpecConfig",
    "SpeedModel",
    "StepCostModel",
    "StepPoint",
    "StepShape",
    "StepTime",
    "TpotHistogram",
    "TpotSpread",
    "acceptance_from_counters",
    "acceptance_sensitivity",
    "best_k_by_batch",
    "choose",
    "cost_prior",
    "crossovers",
    "draft_reach",
    "draw_crossovers",
    "expected_tokens_geometric",
    "merge_ranges",
    "predict",
    "relative_gain",
    "share_within",
    "speed_model",
]
