"""The demo's load: a compressed day as a load trace (the benchmark's format), stretched to
the requested length, and the closed-loop concurrency it asks for at any moment.

The same trace drives the live run and the simulated baselines, so the demo makes it
noise-free: the live driver and the virtual-time replay then ask for the same load.
"""

from __future__ import annotations

from bisect import bisect_right
from importlib import resources
from itertools import accumulate
from pathlib import Path

import yaml
from pydantic import ValidationError

from specops_lab.bench import LoadTrace
from specops_lab.demo._errors import DemoError

__all__ = ["DEFAULT_TRACE", "concurrency_at", "load_demo_trace", "segment_at"]

DEFAULT_TRACE = "day.yaml"


def _text(path: Path | None) -> tuple[str, str]:
    if path is None:
        return resources.files("specops_lab.demo").joinpath(
            DEFAULT_TRACE
        ).read_text(), DEFAULT_TRACE
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except OSError as exc:
        raise DemoError(f"cannot read the load trace {path}: {exc}") from exc


def load_demo_trace(path: Path | None, minutes: float) -> LoadTrace:
    """The trace at ``path`` (default: the packaged day), scaled to ``minutes``, noise off."""
    if minutes <= 0:
        raise DemoError(f"--minutes must be > 0, got {minutes}")
    text, name = _text(path)
    try:
        trace = LoadTrace.model_validate(yaml.safe_load(text))
    except (yaml.YAMLError, ValidationError) as exc:
        raise DemoError(
            f"{name} is not a load trace (see bench/traces for examples): {exc}"
        ) from exc
    if trace.sweep:
        raise DemoError(
            f"{name} is a sweep (each segment its own run); the demo needs one timeline"
        )
    scaled = trace.scaled(minutes * 60.0 / trace.duration_s)
    return scaled.model_copy(update={"noise": 0.0})


def _starts(trace: LoadTrace) -> list[float]:
    return [0.0, *accumulate(s.duration_s for s in trace.segments)]


def segment_at(trace: LoadTrace, elapsed_s: float) -> int:
    """Index of the segment running ``elapsed_s`` into the trace (the last one after its end)."""
    return max(0, min(bisect_right(_starts(trace), elapsed_s) - 1, len(trace.segments) - 1))


def concurrency_at(trace: LoadTrace, elapsed_s: float) -> int:
    """Requests the trace keeps in flight ``elapsed_s`` into it (0 once it is over)."""
    if elapsed_s >= trace.duration_s:
        return 0
    index = segment_at(trace, elapsed_s)
    segment = trace.segments[index]
    fraction = (elapsed_s - _starts(trace)[index]) / segment.duration_s
    return max(0, round(segment.at(min(max(fraction, 0.0), 1.0))))
