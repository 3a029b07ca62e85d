"""A service of a model the profile catalog lacks decides from the prior derived for its GPU."""

from __future__ import annotations

from specops.api import parse_spec
from specops.control import (
    ControlInput,
    ControllerState,
    ControlSettings,
    ReasonCode,
    decide,
    service_model,
)
from specops.policy import BatchDistribution, SpecConfig
from specops.render import apply_defaults, performance_profile

SPEC = {
    "model": "Qwen/Qwen3-32B",
    "engine": {"gpu": "H100-SXM5-80GB", "gpusPerPod": 2, "tensorParallelSize": 2},
    "speculation": {"method": "eagle3", "draftModel": "org/Qwen3-32B-eagle3"},
}


def _window(batch: int, k: int) -> ControlInput:
    drafts = 20_000.0
    return ControlInput(
        window_end=0.0,
        load=BatchDistribution.from_samples([batch] * 60),
        context_tokens=1024,
        num_drafts=drafts,
        accepted_per_position=tuple(drafts * 0.7 ** (i + 1) for i in range(k)),
        window_s=60.0,
    )


def test_an_uncatalogued_model_with_a_gpu_decides_and_without_one_holds() -> None:
    spec = apply_defaults(parse_spec(SPEC))
    profile = performance_profile(spec)
    assert profile is not None and "derived" in profile.name
    service = service_model(profile, "eagle3", max_batch=256)
    decision = decide(
        ControllerState.initial(SpecConfig.static(3)), _window(2, 3), service, ControlSettings(), 0
    )
    assert decision.code is not ReasonCode.NO_COST_MODEL
    assert decision.recommended is not None and decision.crossovers
    # Light load on a memory-bound 32B: drafting pays, and more of it than k = 3.
    assert decision.recommended.num_speculative_tokens > 3
    no_gpu = apply_defaults(parse_spec({**SPEC, "engine": {"gpusPerPod": 2}}))
    assert performance_profile(no_gpu) is None
    held = decide(
        ControllerState.initial(SpecConfig.static(3)), _window(2, 3), None, ControlSettings(), 0
    )
    assert held.code is ReasonCode.NO_COST_MODEL and "spec.engine.gpu" in held.reason
