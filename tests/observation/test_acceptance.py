"""E(k) and its error against drafts simulated from a known acceptance process."""

import math
import random

import pytest

from specops.observation import estimate_acceptance
from specops.policy import AcceptanceCurve

# P(token i accepted | token i-1 accepted); constant past position 2, so the geometric
# tail the estimator extrapolates with is the truth.
CONDITIONAL = (0.85, 0.75, 0.7)
MEASURED_K = 3


def true_rate(position: int) -> float:
    rate = 1.0
    for i in range(position + 1):
        rate *= CONDITIONAL[min(i, len(CONDITIONAL) - 1)]
    return rate


def true_expected(k: int) -> float:
    return 1.0 + sum(true_rate(i) for i in range(k))


def simulate(drafts: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    accepted = [0] * MEASURED_K
    for _ in range(drafts):
        for i in range(MEASURED_K):
            if rng.random() >= CONDITIONAL[i]:
                break
            accepted[i] += 1
    return accepted


def test_rates_are_counters_over_drafts() -> None:
    estimate = estimate_acceptance(200, [160, 100, 50], max_k=3)
    assert estimate.curve.rates == pytest.approx((0.8, 0.5, 0.25))
    assert [e.value for e in estimate.expected] == pytest.approx([1.0, 1.8, 2.3, 2.55])
    assert [e.measured for e in estimate.expected] == [True, True, True, True]
    assert estimate.expected[0].stderr == 0.0


def test_measured_and_extrapolated_values_are_within_three_standard_errors() -> None:
    estimate = estimate_acceptance(20_000, simulate(20_000, seed=1), max_k=8)
    for e in estimate.expected:
        assert abs(e.value - true_expected(e.k)) <= 3 * e.stderr + 1e-12, e
    assert [e.measured for e in estimate.expected] == [k <= MEASURED_K for k in range(9)]


def test_two_standard_errors_cover_the_truth_about_95_percent_of_the_time() -> None:
    covered = {2: 0, 6: 0}
    runs = 200
    for seed in range(runs):
        estimate = estimate_acceptance(500, simulate(500, seed), max_k=6)
        for k in covered:
            e = estimate.expected[k]
            covered[k] += abs(e.value - true_expected(k)) <= 1.96 * e.stderr
    for k, hits in covered.items():
        assert 0.88 <= hits / runs <= 0.99, (k, hits)


def test_uncertainty_shrinks_like_one_over_root_drafts() -> None:
    small = estimate_acceptance(1_000, simulate(1_000, seed=2), max_k=6)
    large = estimate_acceptance(100_000, simulate(100_000, seed=2), max_k=6)
    for k in (3, 6):
        ratio = small.expected[k].stderr / large.expected[k].stderr
        assert ratio == pytest.approx(math.sqrt(100), rel=0.15)
    assert large.expected[6].stderr > large.expected[3].stderr


def test_all_accepted_drafts_still_carry_an_error() -> None:
    estimate = estimate_acceptance(5, [5, 5], max_k=4)
    assert all(e.stderr > 0 for e in estimate.expected[1:])
    assert estimate.expected[4].value == pytest.approx(5.0)


def test_matches_the_policy_curve_everywhere() -> None:
    accepted = simulate(3_000, seed=3)
    estimate = estimate_acceptance(3_000, accepted, max_k=7)
    curve = AcceptanceCurve.from_counters(3_000, accepted)
    assert [e.value for e in estimate.expected] == pytest.approx(
        [curve.expected_tokens(k) for k in range(8)]
    )


def test_no_positions_is_an_error() -> None:
    with pytest.raises(ValueError, match="per-position"):
        estimate_acceptance(10, [], max_k=3)


def test_a_tables_short_drafts_count_only_where_they_reached() -> None:
    # 10000 drafts, 40 % of them (small batches) drafting 3 positions, the rest 1.
    reach = [1.0, 0.4, 0.4]
    accepted = [8000.0, 0.4 * 10_000 * 0.56, 0.4 * 10_000 * 0.34]
    corrected = estimate_acceptance(10_000, accepted, 3, reach)
    assert corrected.curve.rates == pytest.approx((0.80, 0.56, 0.34))
    plain = estimate_acceptance(10_000, accepted, 3)
    assert plain.curve.rates == pytest.approx((0.80, 0.224, 0.136))
    # Fewer drafts reached the later positions: their error is the larger for it.
    assert corrected.expected[3].stderr > plain.expected[3].stderr


def test_positions_no_draft_reached_are_not_measured() -> None:
    # Every batch above 16 under [[1, 16, 3], [17, 64, 1]]: only position 0 drafted.
    estimate = estimate_acceptance(10_000, [8000.0, 0.0, 0.0], 3, [1.0, 0.0, 0.0])
    assert estimate.curve.rates == (0.8,)
    assert [e.measured for e in estimate.expected] == [True, True, False, False]
