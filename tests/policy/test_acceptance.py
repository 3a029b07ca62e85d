import math

import pytest

from specops.policy import AcceptanceCurve, expected_tokens_geometric


@pytest.mark.parametrize(
    ("alpha", "k", "expected"),
    [(0.0, 5, 1.0), (1.0, 3, 4.0), (0.5, 1, 1.5), (0.5, 2, 1.75), (0.8, 3, 2.952)],
)
def test_geometric_matches_hand_computed(alpha: float, k: int, expected: float) -> None:
    assert expected_tokens_geometric(alpha, k) == pytest.approx(expected)


def test_geometric_is_bounded_by_one_and_k_plus_one() -> None:
    for alpha in (0.1, 0.5, 0.9, 0.99):
        for k in range(8):
            value = expected_tokens_geometric(alpha, k)
            assert 1.0 <= value <= k + 1


def test_wrong_formula_is_not_used() -> None:
    # 1 / (1 - alpha * k) diverges at alpha * k = 1; the real E(k) stays finite.
    assert math.isfinite(expected_tokens_geometric(0.5, 2))
    assert expected_tokens_geometric(0.5, 2) != pytest.approx(1 / (1 - 0.5 * 2 + 1e-12))


def test_curve_from_counters_is_per_position_over_drafts() -> None:
    curve = AcceptanceCurve.from_counters(100, [80, 60, 30])
    assert curve.rates == (0.8, 0.6, 0.3)
    assert curve.expected_tokens(3) == pytest.approx(2.7)
    assert curve.mean_acceptance_length() == pytest.approx(2.7)


def test_curve_extrapolates_with_last_conditional_rate() -> None:
    curve = AcceptanceCurve((0.8, 0.4))
    assert curve.conditional_tail() == pytest.approx(0.5)
    assert curve.rate(2) == pytest.approx(0.2)
    assert curve.rate(3) == pytest.approx(0.1)
    assert curve.expected_tokens(4) == pytest.approx(1 + 0.8 + 0.4 + 0.2 + 0.1)


def test_geometric_curve_agrees_with_closed_form() -> None:
    curve = AcceptanceCurve.geometric(0.7, 3)
    for k in range(7):
        assert curve.expected_tokens(k) == pytest.approx(expected_tokens_geometric(0.7, k))


def test_curve_rejects_increasing_rates() -> None:
    with pytest.raises(ValueError, match="non-increasing"):
        AcceptanceCurve((0.5, 0.7))


def test_no_drafts_is_unknown_not_zero() -> None:
    with pytest.raises(ValueError, match="no drafts"):
        AcceptanceCurve.from_counters(0, [0, 0])


def test_a_short_window_keeps_the_conditional_rates_a_longer_k_measured() -> None:
    longer = AcceptanceCurve((0.8, 0.6, 0.3))  # conditional 0.75, then 0.5
    short = AcceptanceCurve((0.7,))
    kept = short.extended(longer)
    assert kept.rates == pytest.approx((0.7, 0.7 * 0.75, 0.7 * 0.75 * 0.5))
    # Not the geometric tail of its one position (0.7, 0.49, 0.343).
    assert kept.expected_tokens(3) < short.expected_tokens(3)
    assert longer.extended(short) == longer  # nothing to add past what it measured
    assert AcceptanceCurve((0.5, 0.0)).extended(AcceptanceCurve((0.9, 0.0, 0.0))).rates[2] == 0
