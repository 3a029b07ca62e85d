"""What the controller knows of a service before measuring it, built in one place.

The operator and the benchmark both call :func:`service_model`, so the benchmark runs the
decision path the operator ships: the profile's roofline as the step-time prior (learned
from measurements from there on), the profile family's published acceptance as the
acceptance prior, and vLLM's rule for whether a per-batch-size table applies.
"""

from __future__ import annotations

from specops.control._decide import ServiceModel
from specops.policy import AcceptanceCurve, StepShape, cost_prior
from specops.profiles import PRIOR_ACCEPTANCE, PerformanceProfile, draft_family
from specops.vllm import (
    SEQUENTIAL_DRAFT_METHODS,
    TABLE_STEP_PENALTY_FRACTION,
    TABLE_ZERO_ROW_DRAFT_POSITIONS,
)

__all__ = ["service_model"]


def service_model(
    profile: PerformanceProfile,
    method: str,
    *,
    max_batch: int,
    per_batch_size: bool = True,
    data_parallel: int = 1,
    prior_acceptance: tuple[float, ...] | None = None,
    replicas: int = 1,
) -> ServiceModel:
    """The service's priors; ``prior_acceptance`` overrides the family's published curve.

    What a table costs vLLM besides its k starts at the release's published share of the
    profile's single-stream step; a method that drafts one position a pass pays the
    profile's draft pass per position.
    """
    cost = profile.cost_model(method, roofline=True)
    single_stream = cost.step_time(StepShape(1, 0, 0))
    return ServiceModel(
        method=method,
        cost=cost_prior(
            cost,
            table_s=TABLE_STEP_PENALTY_FRACTION * single_stream,
            zero_row_positions=TABLE_ZERO_ROW_DRAFT_POSITIONS,
            draft_pass_s=profile.draft_pass_s if method in SEQUENTIAL_DRAFT_METHODS else 0.0,
        ),
        max_batch=max_batch,
        per_batch_size=per_batch_size,
        data_parallel=data_parallel,
        replicas=replicas,
        prior_acceptance=AcceptanceCurve(
            prior_acceptance or PRIOR_ACCEPTANCE[draft_family(method)]
        ),
    )
