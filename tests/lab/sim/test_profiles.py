import pytest

from specops.errors import EngineConfigError
from specops.policy import StepShape
from specops.profiles import DraftFamily, draft_family, get_profile, profile_names


def test_h100_profile_is_the_calibration_fit_with_draft_cost_per_drafted_token() -> None:
    model = get_profile("llama3.1-8b-h100").cost_model("eagle")
    shape = StepShape(batch=8, k=3, context_tokens=8000)
    target = 5.886e-3 + 2.101e-5 * 32 + 3.926e-8 * 8000
    draft = 2.135e-3 + 8.414e-7 * 8 * 3 + 2.378e-9 * 8000
    assert model.step_time(shape) == pytest.approx(target + draft + 1.207e-3, rel=1e-12)


def test_lookup_methods_pay_a_fraction_of_the_target_forward() -> None:
    profile = get_profile("llama3.1-8b-h100")
    shape = StepShape(batch=4, k=2, context_tokens=1000)
    model = profile.cost_model("ngram")
    forward = model.target_forward(shape)
    assert model.step_time(shape) == pytest.approx(forward * 1.0059 + 1.207e-3)
    assert draft_family("suffix") is DraftFamily.LOOKUP
    assert draft_family("eagle3") is DraftFamily.NETWORK


def test_h200_scales_only_bandwidth_bound_terms() -> None:
    h100 = get_profile("llama3.1-8b-h100").cost_model("eagle")
    h200 = get_profile("llama3.1-8b-h200").cost_model("eagle")
    assert h200.t_fixed == pytest.approx(h100.t_fixed * 3.35 / 4.8)
    assert h200.c_kv == pytest.approx(h100.c_kv * 3.35 / 4.8)
    assert h200.c_tok == h100.c_tok
    assert h200.t_overhead == h100.t_overhead


def test_70b_tp4_is_slower_per_step_than_8b_and_holds_a_similar_kv_pool() -> None:
    small = get_profile("llama3.1-8b-h100")
    large = get_profile("llama3.1-70b-h100-tp4")
    for batch in (1, 64, 256):
        shape = StepShape(batch=batch, k=0, context_tokens=batch * 700)
        assert large.cost_model(None).step_time(shape) > small.cost_model(None).step_time(shape)
    assert large.tensor_parallel_size == 4
    assert 0.5 < large.kv_cache_tokens / small.kv_cache_tokens < 2


def test_a_draft_network_takes_kv_capacity_and_a_lookup_does_not() -> None:
    profile = get_profile("llama3.1-8b-h100")
    assert profile.kv_capacity("eagle") < profile.kv_capacity(None)
    assert profile.kv_capacity("ngram") == profile.kv_capacity(None)


def test_roofline_is_memory_or_compute_whichever_binds() -> None:
    profile = get_profile("llama3.1-8b-h100")
    model = profile.cost_model(None, roofline=True)
    small = StepShape(batch=1, k=0, context_tokens=0)
    large = StepShape(batch=4096, k=0, context_tokens=0)
    assert model.target_forward(small) == pytest.approx(5.886e-3)
    assert model.target_forward(large) == pytest.approx(2 * 8.0e9 * 4096 / 7.6e14)


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(EngineConfigError) as error:
        get_profile("gpt-5-on-a-toaster")
    for name in profile_names():
        assert name in str(error.value)
