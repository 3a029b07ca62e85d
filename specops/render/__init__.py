"""Pure rendering of a SpeculativeService into the Kubernetes objects it owns."""

from specops.render._defaults import apply_defaults
from specops.render._objects import (
    ENGINE_PORT,
    HASH_ANNOTATION,
    PRE_STOP_SLEEP_SECONDS,
    SIDECAR_PORT,
    RenderOptions,
    child_labels,
    engine_shutdown_timeout,
    performance_profile,
    render_deployment,
    render_objects,
    render_pdb,
    render_pod_monitor,
    render_service,
    selector_labels,
)
from specops.render._plan import Plan, plan
from specops.render._speculation import (
    SpeculationInForce,
    controller_choice_applies,
    data_parallel_size,
    speculation_from_spec,
    speculation_in_force,
    speculation_spec_hash,
    speculative_config_status,
    vllm_speculative_config,
)

__all__ = [
    "ENGINE_PORT",
    "HASH_ANNOTATION",
    "PRE_STOP_SLEEP_SECONDS",
    "SIDECAR_PORT",
    "Plan",
    "RenderOptions",
    "SpeculationInForce",
    "apply_defaults",
    "child_labels",
    "controller_choice_applies",
    "data_parallel_size",
    "engine_shutdown_timeout",
    "performance_profile",
    "plan",
    "render_deployment",
    "render_objects",
    "render_pdb",
    "render_pod_monitor",
    "render_service",
    "selector_labels",
    "speculation_from_spec",
    "speculation_in_force",
    "speculation_spec_hash",
    "speculative_config_status",
    "vllm_speculative_config",
]
