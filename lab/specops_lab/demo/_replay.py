"""The report's comparison: the demo's day replayed in virtual time for every policy, on one
engine truth, with the benchmark's machinery (``specops_lab.bench.compare_on_trace``).

The suite is ``bench/full.yaml`` with the demo's service (its profile, truth, workload,
largest k, max_num_seqs, restart cost, TPOT target, one k or a table) and its controller
settings (window, dwell, minimum gain, hourly cap); the controlled policy is the operator's
own decision code, and every restart it orders serves nothing for the restart cost. The
flat stretches of the day are cut into slices of a window or so, so the figures can be
drawn over the day; the oracle then picks its best config per slice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import ceil
from pathlib import Path

from specops.control import ControlSettings
from specops.profiles import PRIOR_ACCEPTANCE, draft_family
from specops_lab.bench import (
    ORACLE,
    BenchError,
    BenchSuite,
    LoadTrace,
    RunResult,
    Segment,
    SegmentStats,
    Summary,
    TraceResults,
    compare_on_trace,
    load_suite,
    summarize,
)
from specops_lab.demo._errors import DemoError
from specops_lab.demo._plan import DemoOptions

__all__ = [
    "BENCH_SUITE",
    "CONTROLLED",
    "OFF",
    "ORACLE",
    "VLLM_TABLE",
    "Replay",
    "demo_suite",
    "replay_day",
    "sliced",
]

BENCH_SUITE = Path(__file__).resolve().parents[3] / "bench" / "full.yaml"
CONTROLLED = "specops"
OFF = "off"
VLLM_TABLE = "vllm-table"
SLICE_S = 30.0

# The operator's own defaults for what the demo's SpeculativeService leaves unset.
_LOOP = ControlSettings()


def demo_suite(
    options: DemoOptions,
    *,
    initial_k: int,
    k_max: int,
    max_num_seqs: int,
    per_batch_size: bool,
    suite_path: Path = BENCH_SUITE,
) -> BenchSuite:
    """The benchmark's suite with the demo's service and controller settings."""
    try:
        suite, _ = load_suite(suite_path)
    except BenchError as exc:
        raise DemoError(f"the replay needs the benchmark suite: {exc}") from exc
    service = suite.service.model_copy(
        update={
            "profile": options.profile,
            "truth": options.truth,
            "k_max": k_max,
            "initial_k": initial_k,
            "max_num_seqs": max_num_seqs,
            "restart_downtime_s": float(options.restart_cost_s),
            "tpot_target_ms": options.tpot_target_ms,
            "per_batch_size": per_batch_size,
            # The operator's prior, as the demo's SpeculativeService sets none.
            "prior_acceptance": PRIOR_ACCEPTANCE[draft_family(suite.service.method)],
        }
    )
    controller = suite.controller.model_copy(
        update={
            "window_s": float(options.window_s),
            "min_dwell_s": float(options.dwell_s),
            "min_gain": options.min_gain_percent / 100.0,
            "max_reconfigurations_per_hour": options.max_reconfigurations_per_hour,
            "margin": _LOOP.margin,
            "regime_min_s": _LOOP.regime_min_s,
            "regime_max_s": _LOOP.regime_max_s,
            "min_drafts": _LOOP.min_drafts,
        }
    )
    return suite.model_copy(update={"service": service, "controller": controller, "policies": None})


def sliced(trace: LoadTrace, slice_s: float = SLICE_S) -> LoadTrace:
    """The same load with each flat segment cut into slices of about ``slice_s`` (ramps are
    kept whole: their end points are whole requests). Every slice keeps its segment's
    label, so the day's phases can be summed back."""
    pieces: list[Segment] = []
    for index, segment in enumerate(trace.segments):
        label = segment.name(index)
        count = 1 if segment.to is not None else max(1, ceil(segment.duration_s / slice_s - 1e-9))
        piece = segment.model_copy(
            update={"duration_s": segment.duration_s / count, "label": label}
        )
        pieces += [piece] * count
    return trace.model_copy(update={"segments": tuple(pieces)})


@dataclass(frozen=True)
class Replay:
    """Every policy's run over the sliced day, and the oracle per slice."""

    results: TraceResults
    k_max: int
    initial_k: int
    window_s: float
    restart_s: float

    @property
    def truth(self) -> str:
        return self.results.truth

    @property
    def trace(self) -> LoadTrace:
        return self.results.trace

    @property
    def controlled(self) -> RunResult:
        return self.results.runs[CONTROLLED]

    def summary(self, policy: str) -> Summary:
        return self.results.summary(policy)

    def segments(self, policy: str) -> tuple[SegmentStats, ...]:
        if policy == ORACLE:
            return self.results.oracle_segments
        return self.results.runs[policy].segments

    def phases(self) -> tuple[str, ...]:
        """The day's phases (segment labels) in order, each once."""
        return tuple(dict.fromkeys(s.name(i) for i, s in enumerate(self.trace.segments)))

    def phase_summary(self, policy: str, phase: str) -> Summary:
        chosen = [s for s in self.segments(policy) if s.name == phase]
        return summarize(chosen, 0)

    @property
    def statics(self) -> tuple[str, ...]:
        """The static k runs, k = 1 first."""
        return tuple(f"k{k}" for k in range(1, self.k_max + 1) if f"k{k}" in self.results.runs)

    @property
    def best_static(self) -> str:
        """The static k (speculation on) with the most goodput over the day."""
        return max(self.statics, key=lambda name: self.summary(name).goodput)

    @property
    def baselines(self) -> tuple[str, ...]:
        """What specops is set against, in the report's order."""
        named = (OFF, self.best_static, VLLM_TABLE, ORACLE)
        return tuple(n for n in named if n == ORACLE or n in self.results.runs)

    def policies(self) -> Sequence[str]:
        return self.results.policies


def replay_day(
    trace: LoadTrace,
    options: DemoOptions,
    *,
    initial_k: int,
    k_max: int,
    max_num_seqs: int,
    per_batch_size: bool = False,
    suite_path: Path = BENCH_SUITE,
    progress: Callable[[str], None] = lambda _: None,
) -> Replay:
    """``trace`` on ``options.workload``, sliced, for every policy of the demo's suite."""
    suite = demo_suite(
        options,
        initial_k=initial_k,
        k_max=k_max,
        max_num_seqs=max_num_seqs,
        per_batch_size=per_batch_size,
        suite_path=suite_path,
    )
    day = sliced(trace.model_copy(update={"workload": options.workload}))
    try:
        results = compare_on_trace(suite, day, progress)
    except BenchError as exc:
        raise DemoError(f"replaying {trace.name} in virtual time: {exc}") from exc
    return Replay(
        results,
        k_max=k_max,
        initial_k=initial_k,
        window_s=suite.controller.window_s,
        restart_s=suite.service.restart_downtime_s,
    )
