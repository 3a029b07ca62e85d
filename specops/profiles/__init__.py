"""Performance profiles: step-cost models, KV capacity and draft memory per model and GPU,
named and calibrated, or derived from a model's shape and a GPU's datasheet."""

from specops.profiles._catalog import PROFILES, get_profile, profile_names
from specops.profiles._derive import (
    Accelerator,
    ModelShape,
    accelerators,
    derive_profile,
    gpu_names,
    model_shapes,
)
from specops.profiles._lookup import find_profile
from specops.profiles._profile import (
    LOOKUP_METHODS,
    PRIOR_ACCEPTANCE,
    DraftFamily,
    PerformanceProfile,
    draft_family,
)

__all__ = [
    "LOOKUP_METHODS",
    "PRIOR_ACCEPTANCE",
    "PROFILES",
    "Accelerator",
    "DraftFamily",
    "ModelShape",
    "PerformanceProfile",
    "accelerators",
    "derive_profile",
    "draft_family",
    "find_profile",
    "get_profile",
    "gpu_names",
    "model_shapes",
    "profile_names",
]
