"""Where each posterior draw's k stops paying, priced once for all the draws.

A decision's draws differ only in their coefficients, and a step's time is the product of
coefficients and features, floored. So each point's features are averaged over its steps
(the prompts they take) once, and a draw prices the point with one product instead of one
per step; where the floor may bind on one of its steps, the draw prices them one by one,
as :meth:`SpeedModel.point` does. The crossovers are those of :func:`crossovers` with a
speed model per draw, at a fraction of the cost (a decision scans every batch size for
every k in every draw).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specops.policy._choice import Crossover, SpeedModel, Steps
from specops.policy._learn import LearnedCost

__all__ = ["draw_crossovers"]


@dataclass(frozen=True, slots=True)
class _Point:
    """One (batch, k): its steps, their mean features, and the features of the smallest."""

    shapes: Steps
    mean: tuple[float, ...]
    least: tuple[float, ...]


def _point(model: SpeedModel, cost: LearnedCost, batch: int, k: int) -> _Point:
    shapes = model.shapes(batch, k)
    rows = [(cost.features(shape), share) for shape, share in shapes]
    mean = tuple(sum(share * row[i] for row, share in rows) for i in range(len(rows[0][0])))
    smallest = min(shapes, key=lambda pair: pair[0].batched_tokens)[0]
    return _Point(shapes, mean, cost.features(smallest))


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _step_s(cost: LearnedCost, point: _Point) -> float:
    """The point's mean step time under ``cost``.

    With every coefficient >= 0 every feature grows with the prompt tokens a step takes, so
    when the smallest step is above the floor all are, and the mean of the products is the
    product with the mean features.
    """
    if min(cost.coefficients) >= 0 and _dot(cost.coefficients, point.least) >= cost.floor_s:
        return _dot(cost.coefficients, point.mean)
    return sum(share * cost.step_time(shape) for shape, share in point.shapes)


@dataclass
class _Points:
    """The points of one speed model, each worked out once for every draw."""

    model: SpeedModel
    cost: LearnedCost
    found: dict[tuple[int, int], _Point]

    def at(self, batch: int, k: int) -> _Point:
        point = self.found.get((batch, k))
        if point is None:
            point = self.found[(batch, k)] = _point(self.model, self.cost, batch, k)
        return point


def _crossovers(
    cost: LearnedCost, points: _Points, ks: Sequence[int], max_batch: int
) -> tuple[Crossover, ...]:
    off: dict[int, float] = {}
    tokens = points.model.tokens

    def loses(batch: int, k: int) -> bool:
        if batch not in off:
            off[batch] = _step_s(cost, points.at(batch, 0)) / tokens(0)
        return _step_s(cost, points.at(batch, k)) / tokens(k) >= off[batch]

    return tuple(
        Crossover(k, next((b for b in range(1, max_batch + 1) if loses(b, k)), None)) for k in ks
    )


def draw_crossovers(
    model: SpeedModel, draws: Sequence[LearnedCost], ks: Sequence[int], max_batch: int
) -> tuple[tuple[Crossover, ...], ...]:
    """For each draw, :func:`crossovers` of ``model`` with the draw as its step cost.

    ``model`` gives the acceptance, context and prompts; its own cost is not used. The
    draws share the knee and the k = 0 row's positions, which the features depend on.
    """
    if not draws:
        return ()
    first = draws[0]
    if any(
        (d.knee_tokens, d.zero_row_positions) != (first.knee_tokens, first.zero_row_positions)
        for d in draws
    ):
        raise ValueError("the draws must share the knee and the k = 0 row's positions")
    points = _Points(model, first, {})
    return tuple(_crossovers(cost, points, ks, max_batch) for cost in draws)
