"""Facts about the pinned vLLM release that specops must match exactly."""

from specops.vllm._args import flag_value
from specops.vllm._metrics import (
    ENGINE_LABELS,
    ENGINE_METRICS,
    FINISH_REASONS,
    MetricSpec,
    bucket_bounds,
)
from specops.vllm._release import (
    ReleaseError,
    ReleaseMetric,
    ensure_wheel,
    release_bucket_families,
    release_finish_reasons,
    release_metrics,
    release_speculative_keys,
    release_speculative_methods,
    wheel_source,
)
from specops.vllm._speculative_config import (
    DEPRECATED_MTP_METHODS,
    DYNAMIC_SCHEDULE_METHODS,
    METHODS_NEEDING_DRAFT_MODEL,
    METHODS_REFUSING_DRAFT_MODEL,
    SPECULATION_METHODS,
    VLLM_VERSION,
    BatchSizeSchedule,
    SpeculationMethod,
    SpeculativeConfig,
    VllmMethod,
)

__all__ = [
    "DEPRECATED_MTP_METHODS",
    "DYNAMIC_SCHEDULE_METHODS",
    "ENGINE_LABELS",
    "ENGINE_METRICS",
    "FINISH_REASONS",
    "METHODS_NEEDING_DRAFT_MODEL",
    "METHODS_REFUSING_DRAFT_MODEL",
    "SPECULATION_METHODS",
    "VLLM_VERSION",
    "BatchSizeSchedule",
    "MetricSpec",
    "ReleaseError",
    "ReleaseMetric",
    "SpeculationMethod",
    "SpeculativeConfig",
    "VllmMethod",
    "bucket_bounds",
    "ensure_wheel",
    "flag_value",
    "release_bucket_families",
    "release_finish_reasons",
    "release_metrics",
    "release_speculative_keys",
    "release_speculative_methods",
    "wheel_source",
]
