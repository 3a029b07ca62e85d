"""A canary: one pod runs the candidate config beside the fleet, on the same traffic.

What a config would gain is otherwise predicted from the step-time posterior, which data at
one k cannot pin down along every direction. With two or more replicas the service can
measure it instead: one pod runs the candidate while the rest keep the config in force,
the Service shares the requests between them, and each window compares the two groups'
time per output token under that same load. After enough windows the measured speedup,
with its confidence interval, promotes the candidate to the fleet or rolls the canary
back. Pure: windows in, a verdict out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist, fmean, stdev

from specops.policy import SpecConfig

__all__ = [
    "Canary",
    "CanaryReport",
    "CanaryVerdict",
    "canary_report",
]


class CanaryVerdict(StrEnum):
    RUNNING = "Running"
    PROMOTED = "Promoted"
    ROLLED_BACK = "RolledBack"


@dataclass(frozen=True)
class Canary:
    """A canary in progress: its config, the fleet's beside it, and what it measured.

    ``speedups`` holds one entry a window: the fleet's TPOT over the canary's (above 1:
    the canary decodes faster on the shared load). ``predicted_gain`` is what the policy
    expected of it, to set beside the measurement.
    """

    config: SpecConfig
    baseline: SpecConfig
    started_at: float
    predicted_gain: float
    speedups: tuple[float, ...] = ()


@dataclass(frozen=True)
class CanaryReport:
    """A canary's measured gain (the speedup less 1) over its windows: the mean, and the
    interval holding it with the controller's confidence on each side; the interval is
    None before two windows."""

    config: SpecConfig
    baseline: SpecConfig
    windows: int
    gain: float | None
    low: float | None
    high: float | None
    predicted_gain: float
    verdict: CanaryVerdict

    def describe(self) -> str:
        if self.gain is None:
            return f"canary {self.config.describe()}: nothing measured yet"
        spread = (
            f" ({self.low:+.1%} to {self.high:+.1%})"
            if self.low is not None and self.high is not None
            else ""
        )
        return (
            f"canary {self.config.describe()} beside {self.baseline.describe()}: "
            f"{self.gain:+.1%}{spread} measured over {self.windows} windows, "
            f"{self.predicted_gain:+.1%} predicted"
        )


def canary_report(
    canary: Canary,
    *,
    windows: int,
    max_windows: int,
    min_gain: float,
    confidence: float,
) -> CanaryReport:
    """What the canary's windows show, and whether that settles it.

    The speedups are averaged in logs (a ratio), with a normal interval on their mean at
    ``confidence`` one-sided. After ``windows`` windows: promoted when the low end of the
    interval clears ``min_gain`` (the gain that pays a restart at all), rolled back when
    its high end falls short of it. Still undecided after ``max_windows``, it is promoted
    when its mean clears ``min_gain`` and its interval lies above no gain at all, and
    rolled back otherwise: an unproven change is not worth restarting the fleet for.
    """
    logs = [math.log(s) for s in canary.speedups if s > 0]
    n = len(logs)
    gain = math.expm1(fmean(logs)) if logs else None
    low = high = None
    if n >= 2:
        z = NormalDist().inv_cdf(confidence)
        half = z * stdev(logs) / math.sqrt(n)
        low, high = math.expm1(fmean(logs) - half), math.expm1(fmean(logs) + half)
    verdict = CanaryVerdict.RUNNING
    if n >= windows and gain is not None and low is not None and high is not None:
        if low >= min_gain or (n >= max_windows and gain >= min_gain and low > 0):
            verdict = CanaryVerdict.PROMOTED
        elif high < min_gain or n >= max_windows:
            verdict = CanaryVerdict.ROLLED_BACK
    return CanaryReport(
        canary.config,
        canary.baseline,
        n,
        gain,
        low,
        high,
        canary.predicted_gain,
        verdict,
    )
