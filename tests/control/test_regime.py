"""The regime tracker: noise is averaged, a ramp is followed as one regime."""

from specops.control import Regime, RegimeSettings, track_regime
from specops.policy import BatchDistribution

SETTINGS = RegimeSettings()


def _window(level: int) -> BatchDistribution:
    """A window's load: running requests spread evenly over 30 % either side of ``level``."""
    return BatchDistribution.from_samples(list(range(int(0.7 * level), int(1.3 * level) + 1)))


def _fold(levels: list[int], settings: RegimeSettings = SETTINGS) -> tuple[Regime, int]:
    """The regime after windows around these levels, a minute apart, and how many regimes
    began after the first."""
    regime, _ = track_regime(None, _window(levels[0]), None, 0.0, 0.0, settings)
    began = 0
    for minute, level in enumerate(levels[1:], start=1):
        regime, new = track_regime(regime, _window(level), None, 0.0, 60.0 * minute, settings)
        began += new
    return regime, began


def test_a_ramp_is_one_regime_whose_load_follows_the_engines() -> None:
    """From 100 to 200 running requests, +8 % a window: each window overlaps the average
    enough that no new regime begins. Averaged over the windows so far, the regime's load
    would trail at about 145 while the engine runs 200; drifting one way window after
    window, the average restarts from the latest."""
    ramp = [round(100 * 1.08**i) for i in range(10)]
    regime, began = _fold(ramp)
    assert began == 0
    assert regime.started_at == 0.0
    assert regime.load.mean >= 0.85 * ramp[-1]
    averaged, began = _fold(ramp, RegimeSettings(drift=10.0))
    assert began == 0
    assert averaged.load.mean < 0.75 * ramp[-1]


def test_noise_around_a_steady_load_is_averaged_not_followed() -> None:
    """Windows that stray 10 % either side of 100 never drift one way for long: the
    average stays near 100, unmoved by the last window."""
    regime, began = _fold([100, 110, 90, 110, 90, 110, 110, 90, 110])
    assert began == 0
    assert 97 <= regime.load.mean <= 106
    assert regime.windows == 9
