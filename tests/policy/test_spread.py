"""A request's TPOT spread: how sensitive k is to acceptance, the share within a target,
and the spread measured from a TPOT histogram with vLLM's buckets."""

import math
import random

import pytest

from specops.policy import (
    AcceptanceCurve,
    TpotHistogram,
    TpotSpread,
    acceptance_sensitivity,
    share_within,
)
from specops.vllm import bucket_bounds

# vLLM's request TPOT histogram buckets
BOUNDS = bucket_bounds("inter_token_latency", 8192)

HALF = AcceptanceCurve.geometric(0.5, 7)


def test_the_sensitivity_to_acceptance_grows_with_k() -> None:
    assert acceptance_sensitivity(HALF, 0) == 0.0
    assert acceptance_sensitivity(HALF, 1) == pytest.approx(0.5 / 1.5)
    # (1 * 0.5 + 2 * 0.25) / 1.75
    assert acceptance_sensitivity(HALF, 2) == pytest.approx(1.0 / 1.75)
    values = [acceptance_sensitivity(HALF, k) for k in range(1, 8)]
    assert values == sorted(values)


def test_sigma_adds_the_two_terms_in_quadrature() -> None:
    spread = TpotSpread(base=0.03, heterogeneity=0.12)
    assert spread.sigma(HALF, 0) == pytest.approx(0.03)
    assert spread.sigma(HALF, 1) == pytest.approx(math.hypot(0.03, 0.12 / 3))


def test_the_share_within_a_target_keeps_the_mean() -> None:
    assert share_within(0.008, 0.010, 0.0) == 1.0
    assert share_within(0.012, 0.010, 0.0) == 0.0
    # the median of a log-normal with mean m and log sd s is m exp(-s^2 / 2)
    median = 0.010 * math.exp(-(0.2**2) / 2)
    assert share_within(0.010, median, 0.2) == pytest.approx(0.5)
    assert 0.0 < share_within(0.012, 0.010, 0.2) < 0.5 < share_within(0.008, 0.010, 0.2) < 1.0


def _histogram(tpots: list[float]) -> TpotHistogram:
    bounds = BOUNDS
    return TpotHistogram(
        bounds,
        tuple(float(sum(t <= b for t in tpots)) for b in bounds),
        float(len(tpots)),
        sum(tpots) / len(tpots),
    )


def _log_normal(mean: float, sigma: float, n: int, seed: int = 7) -> list[float]:
    rng = random.Random(seed)
    return [mean * math.exp(rng.gauss(0.0, sigma) - sigma**2 / 2) for _ in range(n)]


@pytest.mark.parametrize("sigma", [0.05, 0.1, 0.2])
def test_a_histogram_that_straddles_a_bound_measures_the_spread(sigma: float) -> None:
    """Requests around 24 ms fall on both sides of vLLM's 25 ms bound: the share below it
    pins the spread. Speculation off measures the base term."""
    found = TpotSpread().measured(_histogram(_log_normal(0.024, sigma, 4000)), HALF, 0)
    # one informative bound: the share under 25 ms with the mean, within 0.05
    assert found.base == pytest.approx(sigma, abs=0.05)
    assert found.heterogeneity == TpotSpread().heterogeneity
    assert found.measured_from == 4000


def test_a_k_measures_the_heterogeneity_beside_the_base() -> None:
    spread = TpotSpread(base=0.04, heterogeneity=0.3)
    g = acceptance_sensitivity(HALF, 3)
    true = 0.2
    tpots = _log_normal(0.024, math.hypot(0.04, true * g), 4000)
    found = spread.measured(_histogram(tpots), HALF, 3)
    assert found.base == 0.04
    assert found.heterogeneity == pytest.approx(true, abs=0.04)


def test_a_histogram_all_in_one_bucket_leaves_the_prior_nearly_where_it_was() -> None:
    """At 5 ms every request sits under the 10 ms bound whatever the spread (within
    reason): the histogram cannot tell, and the term stays near its prior."""
    prior = TpotSpread(base=0.05, heterogeneity=0.15)
    found = prior.measured(_histogram(_log_normal(0.005, 0.05, 4000)), HALF, 3)
    assert found.heterogeneity == pytest.approx(0.15, abs=0.05)


def test_a_few_stray_requests_do_not_stretch_the_spread() -> None:
    """Requests that straddled a restart took a few times the others' TPOT (many more of
    them would move the window's mean itself, which the fit takes as given)."""
    tpots = _log_normal(0.024, 0.05, 4000) + [0.06] * 20
    found = TpotSpread().measured(_histogram(tpots), HALF, 0)
    assert found.base < 0.1


@pytest.mark.parametrize("slower", [0, 10, 20])
def test_a_mean_pulled_up_by_slower_requests_does_not_widen_the_spread(slower: int) -> None:
    """A window seen on a ramp: 506 requests under 25 ms, 221 between 25 and 50 ms, a few
    slower, mean 25.5 ms. No log-normal with that mean fits it (it puts too many above 25
    ms or too few above 50), and held there the fit ran to a heterogeneity of 0.39 to 0.45;
    with the mean free to lie below the window's it reads the narrow spread it is."""
    count = 727.0 + slower
    cumulative = tuple(
        0.0 if b <= 0.01 else 506.0 if b <= 0.025 else 727.0 if b < 0.1 else count for b in BOUNDS
    )
    skewed = TpotHistogram(BOUNDS, cumulative, count, 0.0255)
    found = TpotSpread(base=0.05, heterogeneity=0.15).measured(skewed, HALF, 3)
    assert found.heterogeneity < 0.2


def test_nothing_measured_keeps_the_spread() -> None:
    spread = TpotSpread()
    assert spread.measured(None, HALF, 3) is spread
    empty = TpotHistogram(BOUNDS, (0.0,) * len(BOUNDS), 0.0, 0.0)
    assert spread.measured(empty, HALF, 3) is spread


def test_two_pods_histograms_add() -> None:
    a = _histogram([0.01, 0.02])
    b = _histogram([0.03])
    both = a.plus(b)
    assert both.count == 3 and both.mean_s == pytest.approx(0.02)
    assert both.cumulative == _histogram([0.01, 0.02, 0.03]).cumulative
    with pytest.raises(ValueError, match="different buckets"):
        a.plus(TpotHistogram((0.1,), (1.0,), 1.0, 0.05))
