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
)
from specops.policy._config import SCHEDULE_METHODS, ScheduleRange, SpecConfig, schedule_applies
from specops.policy._cost import DraftCost, StepCostModel, StepShape
from specops.policy._load import BatchDistribution
from specops.policy._measure import acceptance_from_counters, draft_reach

__all__ = [
    "SCHEDULE_METHODS",
    "AcceptanceCurve",
    "BatchDistribution",
    "Crossover",
    "DraftCost",
    "Objective",
    "ObjectiveKind",
    "PointEstimate",
    "PolicyChoice",
    "PolicyInput",
    "Prediction",
    "ScheduleRange",
    "SpecConfig",
    "SpeedModel",
    "StepCostModel",
    "StepShape",
    "acceptance_from_counters",
    "best_k_by_batch",
    "choose",
    "crossovers",
    "draft_reach",
    "expected_tokens_geometric",
    "merge_ranges",
    "predict",
    "relative_gain",
    "schedule_applies",
]
