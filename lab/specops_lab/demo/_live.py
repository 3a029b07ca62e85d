"""What the live run is reported as: the controller's decisions on the real control plane,
the load it was actually given (what the client had in flight and what the engines held by
their own gauges, beside what the day asked for), and the fidelity check of the live
engines against the truth. Never a performance row beside the virtual-time replay: the
live engines share this machine's CPUs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specops_lab.bench import LoadTrace
from specops_lab.demo._fidelity import Fidelity
from specops_lab.demo._trace import concurrency_at, segment_at

__all__ = ["HeldLoad", "LiveFigures", "held_by_phase", "phase_of", "phase_spans"]


@dataclass(frozen=True)
class HeldLoad:
    """One phase of the day: the mean requests the trace wanted in flight, the mean the
    client had in flight, and the mean the engines held by their own gauges (running +
    waiting, as Prometheus scraped them; None when it has no samples)."""

    phase: str
    wanted: float
    client: float
    engine: float | None

    @property
    def engine_share(self) -> float | None:
        """What the engines held over what was wanted."""
        if self.engine is None or self.wanted <= 0:
            return None
        return self.engine / self.wanted


@dataclass(frozen=True)
class LiveFigures:
    """The live run's figures. ``engine_by_request_time`` is the requests the engines held
    over the whole day by their own request time (the e2e latency sum's growth) over wall
    time; ``in_flight`` the engines' running + waiting over the day (seconds from its start,
    requests), for the plot."""

    completed: int
    failed: int
    held: tuple[HeldLoad, ...]
    day: HeldLoad
    engine_by_request_time: float | None
    fidelity: Fidelity
    in_flight: tuple[tuple[float, float], ...] = ()

    @property
    def peak(self) -> HeldLoad | None:
        """The phase that wanted the most in flight."""
        return max(self.held, key=lambda h: h.wanted) if self.held else None


def phase_spans(trace: LoadTrace) -> list[tuple[str, float, float]]:
    """(label, start, end) of each phase of the day, in order (a label met again later
    counts as its own span)."""
    spans: list[tuple[str, float, float]] = []
    start = 0.0
    for index, segment in enumerate(trace.segments):
        spans.append((segment.name(index), start, start + segment.duration_s))
        start += segment.duration_s
    return spans


def _wanted(trace: LoadTrace, start: float, end: float) -> float:
    """The trace's mean concurrency over [start, end), sampled every 0.25 s."""
    count = max(1, round((end - start) / 0.25))
    return (
        sum(concurrency_at(trace, start + (i + 0.5) * (end - start) / count) for i in range(count))
        / count
    )


def _mean(series: Sequence[tuple[float, float]], start: float, end: float) -> float | None:
    inside = [value for at, value in series if start < at <= end]
    return sum(inside) / len(inside) if inside else None


def held_by_phase(
    trace: LoadTrace,
    client_held: Callable[[float, float], float],
    engine_series: Sequence[tuple[float, float]],
) -> tuple[tuple[HeldLoad, ...], HeldLoad]:
    """Per phase and over the whole day: wanted, the client's (``client_held(start, end)``:
    its requests' time in flight over wall time) and the engines' (``engine_series``: their
    running + waiting over time, each sample the mean of the interval ending then)."""
    phases = tuple(
        HeldLoad(
            phase=label,
            wanted=_wanted(trace, start, end),
            client=client_held(start, end),
            engine=_mean(engine_series, start, end),
        )
        for label, start, end in phase_spans(trace)
    )
    duration = trace.duration_s
    day = HeldLoad(
        phase="whole day",
        wanted=_wanted(trace, 0.0, duration),
        client=client_held(0.0, duration),
        engine=_mean(engine_series, 0.0, duration),
    )
    return phases, day


def phase_of(trace: LoadTrace) -> Callable[[float], str]:
    """The label of the phase ``seconds`` into the day (of the last phase after its end)."""

    def name(seconds: float) -> str:
        index = segment_at(trace, seconds)
        return trace.segments[index].name(index)

    return name
