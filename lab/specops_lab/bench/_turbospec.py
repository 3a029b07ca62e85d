"""A per-step goodput rule in the manner of TurboSpec / SmartSpec (arXiv 2406.14066).

An in-engine baseline vLLM does not ship: before every step it picks the k that
maximises predicted goodput B * E(k) / T(B, k), with E(k) = (1 - a^(k+1)) / (1 - a) from a
running average of the per-token acceptance a, and T from an online least-squares
regression of observed step times on the step's shape. The regression is refitted every
few steps; the first steps cycle through every k so that it has data for each.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from specops.policy import expected_tokens_geometric

__all__ = ["GoodputRule"]

_FEATURES = 5


def _features(batch: int, k: int) -> npt.NDArray[np.float64]:
    """Step time is affine in these: fixed cost, per request, per draft token, drafting."""
    drafting = 1.0 if k else 0.0
    return np.array([1.0, batch, batch * k, drafting, drafting * batch])


class GoodputRule:
    """Call ``select`` before a step (the engine's k rule) and ``observe`` after it: the
    engine does both as its ``step_rule``. ``observe`` replaces its arrays rather than
    changing them, so a copy of a rule is a snapshot of it."""

    def __init__(
        self,
        *,
        refit_every: int = 8,
        forget: float = 0.999,
        acceptance_memory: float = 0.99,
        explore_rounds: int = 8,
        prior_acceptance: float = 0.5,
    ) -> None:
        self._refit_every = refit_every
        self._forget = forget
        self._memory = acceptance_memory
        self._explore_left = explore_rounds
        self._xtx = np.eye(_FEATURES) * 1e-9
        self._xty = np.zeros(_FEATURES)
        # The fitted step-time coefficients of _features, as plain numbers for select.
        self._weights: tuple[float, ...] = (0.0,) * _FEATURES
        self._since_fit = 0
        self._accepted = prior_acceptance
        self._attempts = 1.0
        self._next_explore = 0
        self._drafts = 0
        self._per_position: tuple[int, ...] = ()

    @property
    def settled(self) -> bool:
        """Exploration is over: ``select`` only reads the state (the engine may then ask it
        about steps ahead; see specops_lab.sim.StepRule)."""
        return self._explore_left == 0

    @property
    def acceptance(self) -> float:
        return min(self._accepted / self._attempts, 0.999)

    def select(self, batch: int, cap: int) -> int:
        if self._explore_left > 0:
            k = self._next_explore % (cap + 1)
            self._next_explore += 1
            if k == cap:
                self._explore_left -= 1
            return k
        alpha = self.acceptance
        best_k, best = 0, -1.0
        fixed, per_request, per_draft, drafting, per_drafting = self._weights
        plain = fixed + per_request * batch
        drafted = plain + drafting + per_drafting * batch
        for k in range(cap + 1):
            step = (drafted + per_draft * batch * k) if k else plain
            if step <= 0:
                continue
            goodput = batch * expected_tokens_geometric(alpha, k) / step
            if goodput > best:
                best_k, best = k, goodput
        return best_k

    def observe(
        self,
        batch: int,
        k: int,
        seconds: float,
        prefill_tokens: int,
        drafts: int,
        accepted_per_position: Sequence[int],
    ) -> None:
        """One finished step, and the engine's spec-decode counters after it."""
        if batch > 0 and prefill_tokens == 0:
            x = _features(batch, k)
            self._xtx = self._forget * self._xtx + np.outer(x, x)
            self._xty = self._forget * self._xty + x * seconds
            self._since_fit += 1
            if self._since_fit >= self._refit_every:
                theta = np.linalg.lstsq(self._xtx, self._xty)[0]
                self._weights = tuple(float(w) for w in theta)
                self._since_fit = 0
        new_drafts = drafts - self._drafts
        if new_drafts > 0 and k > 0:
            before = self._per_position + (0,) * (
                len(accepted_per_position) - len(self._per_position)
            )
            gained = [now - then for now, then in zip(accepted_per_position, before, strict=False)]
            accepted = sum(gained[:k])
            attempts = new_drafts + sum(gained[: k - 1])
            self._accepted = self._memory * self._accepted + accepted
            self._attempts = self._memory * self._attempts + attempts
        self._drafts = drafts
        self._per_position = tuple(accepted_per_position)
