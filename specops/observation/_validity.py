"""Readings no vLLM engine can produce, named so that the controller can say why it holds.

A negative gauge or counter, a NaN or infinite value, one pod's counters falling twice in a
row, more tokens accepted than drafted, a later draft position accepted more
often than an earlier one: each would reach the policy as a plausible number (an acceptance
length at its maximum, a negative context) and drive a change. They are reported instead,
and the pod's readings are left out of every estimate while any is in the window.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from specops.observation._names import SAMPLE_NAMES, Counter, Gauge
from specops.observation._series import Reading

if TYPE_CHECKING:
    from specops.observation._snapshot import Interval

__all__ = ["interval_problems", "reading_problems"]

# Counted values may carry float rounding from sums over engines; anything past this is real.
_SLACK = 1e-6


def reading_problems(reading: Reading) -> tuple[str, ...]:
    """What is impossible in one reading of the series the estimators read (pure)."""
    found: dict[str, str] = {}
    for s in reading.series:
        if s.name not in SAMPLE_NAMES or s.name in found:
            continue
        if math.isnan(s.value) or math.isinf(s.value):
            found[s.name] = f"{s.name} is {s.value}"
        elif s.value < 0:
            found[s.name] = f"{s.name} is negative ({s.value:g})"
        elif s.name == Gauge.KV_CACHE_USAGE and s.value > 1 + _SLACK:
            found[s.name] = f"{s.name} is {s.value:g}, above 1 (a fraction of the pool)"
    return tuple(found.values())


def _interval_problem(interval: Interval) -> str | None:
    counters = interval.counters
    positions = len(interval.accepted_per_position)
    drafts = counters.get(Counter.DRAFTS)
    drafted = counters.get(Counter.DRAFT_TOKENS)
    accepted = counters.get(Counter.ACCEPTED_TOKENS)
    if drafted is not None and accepted is not None and accepted > drafted + _SLACK:
        return f"{accepted:g} tokens accepted but only {drafted:g} drafted"
    if (
        drafts is not None
        and drafted is not None
        and positions > 0
        and drafted > drafts * positions + _SLACK
    ):
        return f"{drafted:g} tokens drafted in {drafts:g} drafts of at most {positions}"
    per_position = interval.accepted_per_position
    if drafts is not None and per_position and per_position[0] > drafts + _SLACK:
        return f"position 0 accepted {per_position[0]:g} times in {drafts:g} drafts"
    for i in range(1, len(per_position)):
        if per_position[i] > per_position[i - 1] + _SLACK:
            return (
                f"position {i} accepted more often ({per_position[i]:g}) than position "
                f"{i - 1} ({per_position[i - 1]:g}); a draft stops at its first rejection"
            )
    return None


def interval_problems(intervals: Sequence[Interval], one_engine: bool) -> tuple[str, ...]:
    """What is impossible in consecutive intervals of readings (pure).

    A restarted engine counts up from zero and takes longer to load than a scrape takes, so
    one pod's counters never go down in two intervals in a row. Summed over a service's
    pods (``one_engine`` false) they can, as a rolling update replaces pods one by one.
    """
    problems: list[str] = []
    resets = sum(i.reset for i in intervals)
    in_a_row = any(a.reset and b.reset for a, b in itertools.pairwise(intervals))
    if one_engine and in_a_row:
        problems.append(
            f"counters went down in {resets} of {len(intervals)} intervals, twice in a row; "
            "a restarted engine counts up from zero"
        )
    for interval in intervals:
        if (problem := _interval_problem(interval)) is not None:
            problems.append(problem)
            break
    return tuple(problems)
