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
    # One bucket a batch size; only where the share changes, and the bound before, is kept.
    fractions = dict(zip(found.bounds, found.cumulative_fractions, strict=True))
    assert fractions == pytest.approx(
        {0: 0.0, 1: 0.0, 2: 0.6, 9: 0.6, 10: 0.9, 39: 0.9, 40: 1.0, math.inf: 1.0}
    )


def test_every_batch_size_up_to_256_has_a_bucket_of_its_own() -> None:
    found = distribution([127.0] * 9 + [128.0], RUNNING_BOUNDS)
    assert found is not None
    fractions = dict(zip(found.bounds, found.cumulative_fractions, strict=True))
    assert fractions == pytest.approx({0: 0.0, 126: 0.0, 127: 0.9, 128: 1.0, math.inf: 1.0})


def test_no_samples_is_no_distribution() -> None:
    assert distribution([], RUNNING_BOUNDS) is None
    with pytest.raises(ValueError):
        quantile([], 0.5)
