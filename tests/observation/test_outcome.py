import bisect
import math
import random

import pytest

from specops.observation import Histogram, histogram_quantile, latency_quantiles

ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, math.inf)


def bucketed(values: list[float], bounds: tuple[float, ...]) -> Histogram:
    counts = [0.0] * len(bounds)
    for v in values:
        counts[bisect.bisect_left(bounds, v)] += 1
    cumulative = [sum(counts[: i + 1]) for i in range(len(bounds))]
    return Histogram(bounds, tuple(cumulative), float(len(values)), sum(values))


def test_prometheus_interpolation_by_hand() -> None:
    hist = Histogram((1.0, 2.0, 4.0, math.inf), (10.0, 30.0, 40.0, 40.0), 40.0, 70.0)
    assert histogram_quantile(0.25, hist) == pytest.approx(1.0)  # rank 10, top of bucket 1
    assert histogram_quantile(0.5, hist) == pytest.approx(1.5)  # rank 20, halfway in (1, 2]
    assert histogram_quantile(0.125, hist) == pytest.approx(0.5)  # lowest bucket from 0
    assert histogram_quantile(1.0, hist) == pytest.approx(4.0)


def test_rank_in_the_inf_bucket_answers_the_highest_finite_bound() -> None:
    hist = Histogram((1.0, 2.0, math.inf), (1.0, 2.0, 10.0), 10.0, 100.0)
    assert histogram_quantile(0.9, hist) == 2.0


def test_empty_histogram_has_no_quantiles() -> None:
    hist = Histogram((1.0, math.inf), (0.0, 0.0), 0.0, 0.0)
    assert histogram_quantile(0.5, hist) is None
    assert latency_quantiles(hist) is None
    with pytest.raises(ValueError):
        histogram_quantile(1.5, hist)


def test_quantiles_of_a_known_distribution_are_within_one_bucket() -> None:
    rng = random.Random(4)
    # Lognormal ITL around 40 ms.
    values = [rng.lognormvariate(math.log(0.04), 0.4) for _ in range(50_000)]
    found = latency_quantiles(bucketed(values, ITL_BUCKETS))
    assert found is not None
    ordered = sorted(values)
    for q, estimate in ((0.5, found.p50), (0.9, found.p90), (0.99, found.p99)):
        truth = ordered[int(q * len(ordered)) - 1]
        i = bisect.bisect_left(ITL_BUCKETS, truth)
        lower = ITL_BUCKETS[i - 1] if i else 0.0
        assert lower <= estimate <= ITL_BUCKETS[i], (q, truth, estimate)
    assert found.mean == pytest.approx(sum(values) / len(values))
    assert found.observations == len(values)
