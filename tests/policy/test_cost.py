import pytest

from specops.policy import DraftCost, StepCostModel, StepShape

MODEL = StepCostModel(
    t_fixed=5e-3,
    c_tok=2e-5,
    c_kv=4e-8,
    t_overhead=1e-3,
    draft=DraftCost(t_fixed=2e-3, c_tok=1e-6, c_kv=2e-9),
)


def test_no_drafting_costs_target_plus_overhead() -> None:
    shape = StepShape(batch=8, k=0, context_tokens=8000)
    assert MODEL.step_time(shape) == pytest.approx(5e-3 + 2e-5 * 8 + 4e-8 * 8000 + 1e-3)


def test_drafting_adds_verified_tokens_and_draft_cost() -> None:
    shape = StepShape(batch=8, k=3, context_tokens=8000)
    target = 5e-3 + 2e-5 * 32 + 4e-8 * 8000
    draft = 2e-3 + 1e-6 * 24 + 2e-9 * 8000
    assert MODEL.step_time(shape) == pytest.approx(target + draft + 1e-3)


def test_compute_floor_dominates_at_large_batches() -> None:
    roofline = StepCostModel(
        t_fixed=5e-3,
        c_tok=0.0,
        c_kv=0.0,
        t_overhead=0.0,
        draft=DraftCost(),
        flops_per_token=1.6e10,
        peak_flops=8e14,
    )
    assert roofline.step_time(StepShape(batch=1, k=0, context_tokens=0)) == pytest.approx(5e-3)
    assert roofline.step_time(StepShape(batch=1024, k=0, context_tokens=0)) == pytest.approx(
        1.6e10 * 1024 / 8e14
    )


def test_lookup_draft_is_a_fraction_of_the_target() -> None:
    ngram = StepCostModel(
        t_fixed=1e-2,
        c_tok=0.0,
        c_kv=0.0,
        t_overhead=0.0,
        draft=DraftCost(fraction_of_target=0.01),
    )
    assert ngram.step_time(StepShape(batch=4, k=2, context_tokens=0)) == pytest.approx(1.01e-2)


def test_negative_shapes_are_rejected() -> None:
    with pytest.raises(ValueError):
        StepShape(batch=-1, k=0, context_tokens=0)
