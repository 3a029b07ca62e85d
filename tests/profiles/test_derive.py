"""The derived prior against the calibrated profiles, and on the models and GPUs it ships."""

from __future__ import annotations

import math

import pytest

from specops.errors import SpecValidationError
from specops.policy import StepCostModel
from specops.profiles import (
    PROFILES,
    accelerators,
    derive_profile,
    find_profile,
    gpu_names,
    model_shapes,
)

# The tolerance the derivation must meet on every term of a calibrated profile.
TOLERANCE = 0.03
CALIBRATED = [
    ("llama3.1-8b-h100", "meta-llama/Llama-3.1-8B-Instruct", "H100-SXM5-80GB", 1),
    ("llama3.1-8b-h200", "meta-llama/Llama-3.1-8B-Instruct", "H200-SXM-141GB", 1),
    ("llama3.1-70b-h100-tp4", "meta-llama/Llama-3.1-70B-Instruct", "H100-SXM5-80GB", 4),
]


def _terms(model: StepCostModel) -> dict[str, float]:
    return {
        "t_fixed": model.t_fixed,
        "c_tok": model.c_tok,
        "c_kv": model.c_kv,
        "t_overhead": model.t_overhead,
        "draft.t_fixed": model.draft.t_fixed,
        "draft.c_tok": model.draft.c_tok,
        "draft.c_kv": model.draft.c_kv,
        "draft.fraction_of_target": model.draft.fraction_of_target,
    }


@pytest.mark.parametrize(("name", "model", "gpu", "tp"), CALIBRATED)
def test_the_derivation_reproduces_each_calibrated_profile(
    name: str, model: str, gpu: str, tp: int
) -> None:
    calibrated = PROFILES[name]
    derived = derive_profile(model_shapes()[model], accelerators()[gpu], tp)
    for family in ("network", "lookup"):
        want, got = _terms(getattr(calibrated, family)), _terms(getattr(derived, family))
        for term, value in want.items():
            assert got[term] == pytest.approx(value, rel=TOLERANCE), (family, term)
    for field in (
        "kv_cache_tokens",
        "draft_memory_kv_tokens",
        "params",
        "peak_flops",
        "draft_pass_s",
    ):
        assert getattr(derived, field) == pytest.approx(
            getattr(calibrated, field), rel=TOLERANCE
        ), field
    assert derived.gpu == calibrated.gpu == gpu


def test_every_shipped_model_on_every_gpu_it_fits_gets_a_sane_prior() -> None:
    fitted = 0
    for shape in model_shapes().values():
        assert shape.source.startswith("https://") and shape.active_parameters <= shape.parameters
        previous: float | None = None
        for gpu in sorted(accelerators().values(), key=lambda g: g.memory_bandwidth):
            try:
                profile = derive_profile(shape, gpu, 8)
            except SpecValidationError as exc:
                assert "raise spec.engine.tensorParallelSize" in str(exc)
                continue
            fitted += 1
            terms = _terms(profile.network)
            assert all(math.isfinite(v) and v >= 0 for v in terms.values())
            assert profile.kv_cache_tokens > 0 and profile.params == shape.active_parameters
            # More bandwidth reads the same weights sooner.
            if previous is not None:
                assert profile.network.t_fixed < previous
            previous = profile.network.t_fixed
    assert fitted >= len(model_shapes()) * 4


def test_a_mixture_of_experts_computes_with_its_active_parameters_only() -> None:
    gpu = accelerators()["H200-SXM-141GB"]
    moe = derive_profile(model_shapes()["openai/gpt-oss-120b"], gpu, 2)
    dense = derive_profile(model_shapes()["meta-llama/Llama-3.1-70B-Instruct"], gpu, 2)
    assert moe.network.c_tok < dense.network.c_tok / 5
    # A 32-token step touches most of its experts: it reads far more than one token's.
    shape = model_shapes()["openai/gpt-oss-120b"]
    assert shape.read_bytes() > 5 * shape.active_parameters * shape.bytes_per_parameter


def test_a_model_too_large_for_its_gpus_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecValidationError, match="does not fit on 1 x L40S"):
        derive_profile(
            model_shapes()["meta-llama/Llama-3.1-70B-Instruct"], accelerators()["L40S"], 1
        )


def test_the_catalog_comes_first_then_a_derived_prior_then_none() -> None:
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    assert find_profile(None, model=llama, tensor_parallel_size=1) is PROFILES["llama3.1-8b-h100"]
    assert (
        find_profile(None, model=llama, tensor_parallel_size=1, gpu="H200-SXM-141GB")
        is PROFILES["llama3.1-8b-h200"]
    )
    derived = find_profile(None, model=llama, tensor_parallel_size=1, gpu="A100-SXM4-80GB")
    assert derived is not None and derived.name not in PROFILES and derived.gpu == "A100-SXM4-80GB"
    qwen = find_profile(None, model="Qwen/Qwen3-32B", tensor_parallel_size=2, gpu="H100-SXM5-80GB")
    assert qwen is not None and "derived" in qwen.name
    assert find_profile(None, model="Qwen/Qwen3-32B", tensor_parallel_size=2) is None
    assert find_profile(None, model="org/unknown", tensor_parallel_size=1, gpu="B200") is None
    assert "MI300X" in gpu_names() and "B200" in gpu_names()
