"""Raw series as both sources deliver them: a name, its labels, one value, one time.

The engine's ``/metrics`` page and Prometheus's HTTP API are turned into the same flat
list of :class:`Series`, so everything after this module cannot tell the sources apart
and both give the same estimates on the same data.
"""

from __future__ import annotations

import bisect
import itertools
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specops.errors import MetricsError
from specops.observation._names import SAMPLE_NAMES

__all__ = [
    "Reading",
    "Series",
    "label_matchers",
    "parse_exposition",
    "parse_prometheus_matrix",
    "prometheus_selector",
]

# A page line is kept when it starts with one of these: the parser's cost is per line,
# and a vLLM page has hundreds of series the estimators never read.
_LINE_PREFIXES = tuple(f"{name}{end}" for name in sorted(SAMPLE_NAMES) for end in ("{", " "))


@dataclass(frozen=True, slots=True)
class Series:
    """One sample of one series (``name`` is the sample name: ``..._total``, ``..._bucket``)."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Reading:
    """Everything one source returned at once, stamped with when it was measured."""

    timestamp: float
    series: Sequence[Series]


def _wanted_lines(text: str) -> str:
    """The samples the estimators read; comments go too (the samples keep their names)."""
    return "\n".join(line for line in text.splitlines() if line.startswith(_LINE_PREFIXES)) + "\n"


def parse_exposition(text: str, timestamp: float) -> Reading:
    """Parse a Prometheus text page (vLLM's ``/metrics``) into the series the estimators read.

    Raises :class:`MetricsError` when the page is not valid exposition text or has
    none of vLLM's series (not a vLLM engine, or the wrong port).
    """
    wanted = _wanted_lines(text)
    if not wanted.strip():
        raise MetricsError("the metric page has none of vLLM's spec-decode or load series")
    try:
        families = list(text_string_to_metric_families(wanted))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise MetricsError(f"malformed metric page: {exc}") from exc
    series = [
        Series(sample.name, sample.labels, float(sample.value))
        for family in families
        for sample in family.samples
    ]
    return Reading(timestamp=timestamp, series=series)


_MATCH_OPERATORS = ("=~", "!~", "!=", "=")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def label_matchers(pairs: Sequence[str]) -> tuple[tuple[str, str, str], ...]:
    """``label=value``, ``label!=value``, ``label=~regex`` or ``label!~regex``, as PromQL
    writes them (no quotes), parsed to (label, operator, value)."""
    parsed = []
    for pair in pairs:
        # The first operator in the text, the longer one where two start there ("=~").
        found = min(
            ((pair.find(op), op) for op in _MATCH_OPERATORS if pair.find(op) > 0),
            key=lambda position: (position[0], -len(position[1])),
            default=None,
        )
        if found is None or not _LABEL.fullmatch(pair[: found[0]]):
            raise ValueError(
                f"{pair!r} is not a label matcher: write label=value, label!=value, "
                "label=~regex or label!~regex"
            )
        at, op = found
        parsed.append((pair[:at], op, pair[at + len(op) :]))
    return tuple(parsed)


def prometheus_selector(
    matchers: Mapping[str, str] | Sequence[tuple[str, str, str]],
) -> str:
    """A PromQL selector for the series the estimators read, with the given labels (escaped):
    a mapping of label to value, or (label, operator, value) from :func:`label_matchers`."""
    names = "|".join(sorted(SAMPLE_NAMES))
    parts = [f'__name__=~"{names}"']
    triples = (
        [(label, "=", value) for label, value in matchers.items()]
        if isinstance(matchers, Mapping)
        else list(matchers)
    )
    for label, op, value in sorted(triples):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'{label}{op}"{escaped}"')
    return "{" + ",".join(parts) + "}"


def _target(labels: Mapping[str, str]) -> tuple[str, str]:
    return labels.get("job", ""), labels.get("instance", "")


def parse_prometheus_matrix(
    payload: Any, after: float | None = None, stale_s: float | None = None
) -> list[Reading] | None:
    """Turn the answer to ``<selector>[lookback]`` into one reading per scrape, oldest first.

    Prometheus stamps every sample of one scrape with the scrape's time. The reading at a
    time ``t`` holds each target's latest scrape up to ``t``, as an instant query at ``t``
    would see it: a target last scraped over ``stale_s`` before ``t`` is gone, and series
    without a sample at their target's scrape have vanished from it. Readings are taken at
    scrape times later than ``after`` and about a scrape interval apart, so that between two
    readings every target moved on by one scrape: a step time is an interval's length over
    its steps, and targets scraped out of phase must not split one interval in two. A
    lookback as long as a window thus fills the window at once (after a restart), and a
    later call returns only what is new. Returns
    None when no series had a sample within the lookback (a dead or absent target), and an
    empty list when nothing is newer than ``after``. Raises :class:`MetricsError` for an
    error answer or one that is not a matrix.
    """
    by_target = _series_by_target(_matrix(payload))
    if not by_target:
        return None
    scrapes = {
        target: sorted({t for member in members for t in member.values})
        for target, members in by_target.items()
    }
    spacing = _scrape_spacing(scrapes.values())
    readings = []
    last = after
    for when in sorted({t for stamps in scrapes.values() for t in stamps}):
        if last is not None and (when <= last or when - last < spacing):
            continue
        last = when
        readings.append(_reading_at(when, by_target, scrapes, stale_s))
    return readings


def _matrix(payload: Any) -> dict[str, Any]:
    """The data of a successful range query; a MetricsError for any other answer."""
    if not isinstance(payload, dict):
        raise MetricsError("Prometheus answer is not a JSON object")
    if payload.get("status") != "success":
        raise MetricsError(
            f"PromQL error ({payload.get('errorType', 'unknown')}): "
            f"{payload.get('error', 'no message')}"
        )
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise MetricsError("Prometheus answer has no matrix under data.result; query a range")
    return data


def _series_by_target(data: Mapping[str, Any]) -> dict[tuple[str, str], list[_Samples]]:
    """The matrix's series with samples, grouped by the target that exposed them."""
    by_target: dict[tuple[str, str], list[_Samples]] = {}
    try:
        for entry in data["result"]:
            labels: dict[str, str] = dict(entry["metric"])
            if entry["values"]:
                name = labels.pop("__name__", "")
                values = {float(stamp): float(text) for stamp, text in entry["values"]}
                by_target.setdefault(_target(labels), []).append(_Samples(name, labels, values))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MetricsError(f"Prometheus matrix is malformed: {exc!r}") from exc
    return by_target


def _reading_at(
    when: float,
    by_target: Mapping[tuple[str, str], list[_Samples]],
    scrapes: Mapping[tuple[str, str], list[float]],
    stale_s: float | None,
) -> Reading:
    """What an instant query at ``when`` sees: each live target's latest scrape by then."""
    series: list[Series] = []
    for target, members in by_target.items():
        stamps = scrapes[target]
        latest = stamps[bisect.bisect_right(stamps, when) - 1] if stamps[0] <= when else None
        if latest is None or (stale_s is not None and when - latest > stale_s):
            continue
        series.extend(
            Series(m.name, m.labels, m.values[latest]) for m in members if latest in m.values
        )
    return Reading(timestamp=when, series=series)


def _scrape_spacing(scrapes: Iterable[Sequence[float]]) -> float:
    """Nine tenths of the shortest median time between one target's scrapes (0 if unknown):
    the least time between readings, with room for the scrapes' jitter."""
    gaps = [
        statistics.median(b - a for a, b in itertools.pairwise(stamps))
        for stamps in scrapes
        if len(stamps) > 1
    ]
    return 0.9 * min(gaps) if gaps else 0.0


@dataclass(frozen=True, slots=True)
class _Samples:
    """One series of a matrix: its samples by scrape time."""

    name: str
    labels: Mapping[str, str]
    values: Mapping[float, float]
