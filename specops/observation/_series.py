"""Raw series as both sources deliver them: a name, its labels, one value, one time.

The engine's ``/metrics`` page and Prometheus's HTTP API are turned into the same flat
list of :class:`Series`, so everything after this module cannot tell the sources apart
and both give the same estimates on the same data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specops.errors import MetricsError
from specops.observation._names import SAMPLE_NAMES

__all__ = [
    "Reading",
    "Series",
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


def prometheus_selector(matchers: Mapping[str, str]) -> str:
    """A PromQL selector for the series the estimators read, with the given labels (escaped)."""
    names = "|".join(sorted(SAMPLE_NAMES))
    parts = [f'__name__=~"{names}"']
    for label, value in sorted(matchers.items()):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'{label}="{escaped}"')
    return "{" + ",".join(parts) + "}"


def _target(labels: Mapping[str, str]) -> tuple[str, str]:
    return labels.get("job", ""), labels.get("instance", "")


def parse_prometheus_matrix(payload: Any) -> Reading | None:
    """Turn the answer to ``<selector>[lookback]`` into the newest scrape of each target.

    Prometheus stamps every sample of one scrape with the scrape's time, so the newest
    timestamp of a target marks its latest scrape; series without a sample at that time
    have vanished from the target and are left out. Returns None when no series had a
    sample within the lookback (a dead or absent target). Raises :class:`MetricsError`
    for an error answer or one that is not a matrix.
    """
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
    newest_by_target: dict[tuple[str, str], float] = {}
    latest: list[tuple[str, dict[str, str], float, float]] = []
    try:
        for result in data["result"]:
            labels: dict[str, str] = dict(result["metric"])
            if not result["values"]:
                continue
            stamp, text = result["values"][-1]
            when, value = float(stamp), float(text)
            latest.append((labels.pop("__name__", ""), labels, when, value))
            target = _target(labels)
            newest_by_target[target] = max(newest_by_target.get(target, when), when)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MetricsError(f"Prometheus matrix is malformed: {exc!r}") from exc
    if not latest:
        return None
    series = [
        Series(name, labels, value)
        for name, labels, when, value in latest
        if when == newest_by_target[_target(labels)]
    ]
    return Reading(timestamp=max(newest_by_target.values()), series=series)
