"""Named performance profiles: step-cost models, KV capacity and draft memory per model and GPU."""

from specops.profiles._catalog import PROFILES, find_profile, get_profile, profile_names
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
    "DraftFamily",
    "PerformanceProfile",
    "draft_family",
    "find_profile",
    "get_profile",
    "profile_names",
]
