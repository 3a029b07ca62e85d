"""Step-time noise: one lognormal factor per step, the same whether steps come one by one or
a stretch at a time."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["StepNoise"]

_BLOCK = 4096


class StepNoise:
    """Factors ``exp(sigma * z - sigma**2 / 2)`` (mean one), z standard normal from a seeded
    stream, read in order: ``peek(n)`` shows the next n, ``take(n)`` uses them up. A stretch
    peeks at as many steps as it plans and takes those it commits, so the step after it gets
    the factor it would have had had every step been run alone (numpy draws a block of
    normals exactly as it draws them one at a time)."""

    def __init__(self, rng: np.random.Generator, sigma: float) -> None:
        self._rng = rng
        self.sigma = sigma
        self._factors: npt.NDArray[np.float64] = np.empty(0)
        self._at = 0

    def peek(self, n: int) -> npt.NDArray[np.float64]:
        if self._at + n > self._factors.size:
            z = self._rng.standard_normal(max(n, _BLOCK))
            sigma = self.sigma
            fresh = np.exp(sigma * z - sigma * sigma / 2)
            self._factors = np.concatenate((self._factors[self._at :], fresh))
            self._at = 0
        return self._factors[self._at : self._at + n]

    def take(self, n: int) -> None:
        self._at += n
