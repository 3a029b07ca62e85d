"""How whole prompts fall on the decoding steps, and what that costs near the knee."""

from __future__ import annotations

import pytest

from specops.policy import AcceptanceCurve, DraftCost, Prompts, SpeedModel, StepCostModel

# A roofline: 6 ms of weights read, compute-bound past 300 batched tokens.
KNEE_COST = StepCostModel(
    t_fixed=6e-3,
    c_tok=0.0,
    c_kv=0.0,
    t_overhead=1e-3,
    draft=DraftCost(t_fixed=1e-3),
    flops_per_token=2e-5,
    peak_flops=1.0,
)


@pytest.mark.parametrize("emitted", [0.5, 12.0, 192.0, 2000.0, 20_000.0])
def test_the_steps_take_the_prompt_tokens_of_their_emitted_tokens_on_average(
    emitted: float,
) -> None:
    prompts = Prompts(per_output_token=0.5, mean_tokens=350.0)
    shares = prompts.per_step(emitted)
    assert sum(share for _, share in shares) == pytest.approx(1.0)
    mean = sum(tokens * share for tokens, share in shares)
    assert mean == pytest.approx(emitted * 0.5, rel=0.01, abs=1.0)
    assert all(tokens >= 0 for tokens, _ in shares)


def test_a_prompt_comes_whole_so_most_steps_take_none() -> None:
    shares = dict(Prompts(per_output_token=0.5, mean_tokens=350.0).per_step(192.0))
    assert set(shares) <= {0, 350, 700, 1050, 1400}
    assert shares[0] > 0.7


def test_without_a_prompt_length_the_tokens_spread_evenly_and_without_prompts_none() -> None:
    assert Prompts(per_output_token=0.5).per_step(192.0) == ((96, 1.0),)
    assert Prompts().per_step(192.0) == ((0, 1.0),)
    with pytest.raises(ValueError, match=">= 0"):
        Prompts(per_output_token=-1.0)


def test_whole_prompts_cost_more_than_their_even_share_below_the_knee_only() -> None:
    """Below the knee a step with a whole prompt runs past it, while the even share stays
    under it and looks free; far past the knee the step time is linear and both agree."""
    curve = AcceptanceCurve((0.7, 0.45, 0.28))
    whole = SpeedModel(KNEE_COST, curve, 0.0, Prompts(per_output_token=0.5, mean_tokens=350.0))
    even = SpeedModel(KNEE_COST, curve, 0.0, Prompts(per_output_token=0.5))
    assert whole.point(192, 0).step_s > 1.05 * even.point(192, 0).step_s
    assert whole.point(2048, 0).step_s == pytest.approx(even.point(2048, 0).step_s, rel=0.01)
