"""Where each posterior draw's k stops paying, priced once for all the draws.

A decision's draws differ only in their coefficients, and a step's time is the product of
coefficients and features, floored. A draw whose every term is >= 0 and whose emptiest
step is above the floor has every step above it (each feature only grows with the step), so
k loses to off at a batch exactly when the coefficients' product with one vector, k's mean
features per emitted token less off's, is >= 0. That vector is worked out once per (batch,
k) for all the draws; a draw that may meet the floor goes through :func:`crossovers` with
its own speed model. The crossovers are those of a speed model per draw, at a fraction of
the cost (a decision scans every batch size for every k in every draw).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

from specops.policy._choice import Crossover, SpeedModel, crossovers
from specops.policy._cost import StepShape
from specops.policy._learn import LearnedCost

__all__ = ["draw_crossovers"]


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    total: float = sum(map(operator.mul, a, b))
    return total


@dataclass
class _Margins:
    """Per (batch, k): k's mean features per emitted token less off's, found once."""

    model: SpeedModel
    cost: LearnedCost
    per_token: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    found: dict[tuple[int, int], tuple[float, ...]] = field(default_factory=dict)

    def _per_token(self, batch: int, k: int) -> list[float]:
        mean = self.per_token.get((batch, k))
        if mean is None:
            rows = [
                (self.cost.features(shape), share) for shape, share in self.model.shapes(batch, k)
            ]
            tokens = self.model.tokens(k)
            mean = self.per_token[(batch, k)] = [
                sum(share * row[i] for row, share in rows) / tokens for i in range(len(rows[0][0]))
            ]
        return mean

    def at(self, batch: int, k: int) -> tuple[float, ...]:
        margin = self.found.get((batch, k))
        if margin is None:
            on, off = self._per_token(batch, k), self._per_token(batch, 0)
            margin = self.found[(batch, k)] = tuple(map(operator.sub, on, off))
        return margin


def _crossovers(
    model: SpeedModel, cost: LearnedCost, margins: _Margins, ks: Sequence[int], max_batch: int
) -> tuple[Crossover, ...]:
    c = cost.coefficients
    if min(c) < 0 or _dot(c, cost.features(StepShape(0, 0, 0))) < cost.floor_s:
        # the floor may bind on some step: the draw's own speed model prices each one
        return crossovers(model, ks, max_batch)
    return tuple(
        Crossover(
            k, next((b for b in range(1, max_batch + 1) if _dot(c, margins.at(b, k)) >= 0.0), None)
        )
        for k in ks
    )


def draw_crossovers(
    models: Sequence[SpeedModel], ks: Sequence[int], max_batch: int
) -> tuple[tuple[Crossover, ...], ...]:
    """For each speed model, whose cost is a posterior draw, its :func:`crossovers`.

    The models share the acceptance, context, prompts and spread, and their draws share
    the knee and the k = 0 row's positions, which the features depend on. A model that
    prices a step for a draw the floor may bind keeps that price for the decision's
    other looks at the same draw.
    """
    if not models:
        return ()
    draws: list[LearnedCost] = []
    for model in models:
        if not isinstance(model.cost, LearnedCost):
            raise TypeError(f"each model's cost must be a posterior draw, not {model.cost!r}")
        draws.append(model.cost)
    first, template = draws[0], models[0]
    shared = (template.acceptance, template.context_tokens, template.prompts, template.spread)
    if any(
        (d.knee_tokens, d.zero_row_positions) != (first.knee_tokens, first.zero_row_positions)
        for d in draws
    ):
        raise ValueError("the draws must share the knee and the k = 0 row's positions")
    if any((m.acceptance, m.context_tokens, m.prompts, m.spread) != shared for m in models):
        raise ValueError("the models must share the acceptance, context, prompts and spread")
    margins = _Margins(template, first)
    return tuple(
        _crossovers(model, cost, margins, ks, max_batch)
        for model, cost in zip(models, draws, strict=True)
    )
