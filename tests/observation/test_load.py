import math

import pytest

from specops.observation import RUNNING_BOUNDS, distribution, quantile


def test_nearest_rank_quantiles_are_observed_values() -> None:
    values = list(range(1, 101))
    assert quantile(values, 0.5) == 50
    assert quantile(values, 0.9) == 90
    assert quantile(values, 0.99) == 99
    assert quantile(values, 1.0) == 100
    assert quantile([7.0], 0.01) == 7.0


def test_distribution_of_a_known_sample() -> None:
    # 60 % of the time 2 running, 30 % 10, 10 % 40.
    values = [2.0] * 60 + [10.0] * 30 + [40.0] * 10
    found = distribution(values, RUNNING_BOUNDS)
    assert found is not None
    assert found.samples == 100
    assert found.mean == pytest.approx(0.6 * 2 + 0.3 * 10 + 0.1 * 40)
    assert (found.p50, found.p90, found.p99, found.maximum) == (2.0, 10.0, 40.0, 40.0)
    fractions = dict(zip(found.bounds, found.cumulative_fractions, strict=True))
    assert fractions[1] == 0.0
    assert fractions[2] == pytest.approx(0.6)
    assert fractions[8] == pytest.approx(0.6)
    assert fractions[12] == pytest.approx(0.9)
    assert fractions[48] == pytest.approx(1.0)
    assert fractions[math.inf] == 1.0


def test_no_samples_is_no_distribution() -> None:
    assert distribution([], RUNNING_BOUNDS) is None
    with pytest.raises(ValueError):
        quantile([], 0.5)
