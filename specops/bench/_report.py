"""From runs to figures: the oracle, per-trace summaries, the targets, JSON and markdown.

The oracle picks, for every segment of a trace, the run that did best there (goodput,
then throughput) in hindsight among every policy but the controller: each static k,
off, vLLM's documented table, the best table computed on the engine's truth, and the
per-step rule; it switches between them for free, so its figures are those segments'
figures stitched together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from specops.bench._run import RunResult, SegmentStats
from specops.bench._spec import LoadTrace

__all__ = [
    "ORACLE",
    "Summary",
    "TargetResult",
    "TraceResults",
    "evaluate_targets",
    "markdown",
    "oracle",
    "results_json",
    "summarize",
]

ORACLE = "oracle"
CONTROLLED = "specops"
VLLM_TABLE = "vllm-table"


@dataclass(frozen=True)
class Summary:
    throughput: float
    goodput: float
    mean_tpot_s: float
    p90_tpot_s: float
    restarts: int


def summarize(segments: Sequence[SegmentStats], restarts: int) -> Summary:
    duration = sum(s.end - s.start for s in segments)
    tpots = np.asarray([t for s in segments for t in s.tpots])
    return Summary(
        throughput=sum(s.tokens for s in segments) / duration,
        goodput=sum(s.goodput * (s.end - s.start) for s in segments) / duration,
        mean_tpot_s=float(tpots.mean()) if tpots.size else float("nan"),
        p90_tpot_s=float(np.percentile(tpots, 90)) if tpots.size else float("nan"),
        restarts=restarts,
    )


def _rank(segment: SegmentStats) -> tuple[float, float]:
    return (segment.goodput, segment.throughput)


@dataclass(frozen=True)
class TraceResults:
    trace: LoadTrace
    runs: Mapping[str, RunResult]
    fixed: tuple[str, ...]
    oracle_segments: tuple[SegmentStats, ...]
    oracle_choices: tuple[str, ...]

    def summary(self, policy: str) -> Summary:
        if policy == ORACLE:
            return summarize(self.oracle_segments, 0)
        run = self.runs[policy]
        return summarize(run.segments, run.restarts)

    @property
    def policies(self) -> tuple[str, ...]:
        return (*self.runs, ORACLE)

    @property
    def truth(self) -> str:
        """The engine truth every run of the trace was measured on."""
        return next(iter(self.runs.values())).truth


def oracle(trace: LoadTrace, runs: Mapping[str, RunResult], fixed: Sequence[str]) -> TraceResults:
    """Best of the ``fixed`` runs per segment, in hindsight, switching for free."""
    if not fixed:
        raise ValueError("the oracle needs at least one fixed-config run")
    chosen: list[str] = []
    stitched: list[SegmentStats] = []
    for index in range(len(trace.segments)):
        best = max(fixed, key=lambda name: _rank(runs[name].segments[index]))
        chosen.append(best)
        stitched.append(runs[best].segments[index])
    return TraceResults(trace, runs, tuple(fixed), tuple(stitched), tuple(chosen))


@dataclass(frozen=True)
class TargetResult:
    target: str
    trace: str
    passed: bool
    detail: str


def _regime_changes(trace: LoadTrace) -> int:
    changes = 0
    for before, after in zip(trace.segments, trace.segments[1:], strict=False):
        end_before = before.to if before.to is not None else before.concurrency
        if after.concurrency != end_before or after.to is not None or after.mix != before.mix:
            changes += 1
    return changes


def _steady_targets(results: TraceResults) -> list[TargetResult]:
    out = []
    controlled = results.runs[CONTROLLED]
    for index, segment in enumerate(results.trace.segments):
        mine = controlled.segments[index].goodput
        best_name = max(results.fixed, key=lambda n: results.runs[n].segments[index].goodput)
        best = results.runs[best_name].segments[index].goodput
        off = results.runs["off"].segments[index].goodput if "off" in results.runs else None
        ratio = mine / best if best else float("nan")
        ok = ratio >= 0.97 and (off is None or mine >= 0.98 * off)
        off_words = f", {mine / off:.3f} of no speculation" if off else ""
        out.append(
            TargetResult(
                "steady: within 3% of the best static, never >2% below off",
                f"{results.trace.name}@c{segment.concurrency}",
                ok,
                f"specops {mine:.0f} tok/s goodput = {ratio:.3f} of best static "
                f"({best_name}, {best:.0f}){off_words}",
            )
        )
    restarts = controlled.restarts
    out.append(
        TargetResult(
            "no flapping: none on stationary load",
            results.trace.name,
            restarts == 0,
            f"{restarts} reconfigurations over {len(results.trace.segments)} steady runs",
        )
    )
    return out


def _mixed_targets(results: TraceResults) -> list[TargetResult]:
    name = results.trace.name
    mine = results.summary(CONTROLLED).goodput
    best_oracle = results.summary(ORACLE).goodput
    statics = [p for p in results.fixed if p == "off" or (p.startswith("k") and p[1:].isdigit())]
    out = [
        TargetResult(
            "mixed: >= 0.95 of the oracle's goodput",
            name,
            mine >= 0.95 * best_oracle,
            f"specops {mine:.0f} / oracle {best_oracle:.0f} = {mine / best_oracle:.3f}",
        )
    ]
    if statics:
        best_static = max(statics, key=lambda p: results.summary(p).goodput)
        static = results.summary(best_static).goodput
        out.append(
            TargetResult(
                "mixed: ahead of the best single static k",
                name,
                mine > static,
                f"specops {mine:.0f} vs {best_static} {static:.0f} ({mine / static - 1:+.1%})",
            )
        )
    if VLLM_TABLE in results.runs:
        table = results.summary(VLLM_TABLE).goodput
        out.append(
            TargetResult(
                "mixed: ahead of vLLM's documented table",
                name,
                mine > table,
                f"specops {mine:.0f} vs {VLLM_TABLE} {table:.0f} ({mine / table - 1:+.1%})",
            )
        )
    return out


def _flapping_target(results: TraceResults) -> TargetResult:
    trace = results.trace
    restarts = results.runs[CONTROLLED].restarts
    changes = _regime_changes(trace)
    if trace.noise > 0 and changes == 0:
        return TargetResult(
            "no flapping: none on stationary noisy load",
            trace.name,
            restarts == 0,
            f"{restarts} reconfigurations on a stationary load with noise {trace.noise:g}",
        )
    return TargetResult(
        "no flapping: <= 1 reconfiguration per load-regime change",
        trace.name,
        restarts <= changes,
        f"{restarts} reconfigurations for {changes} regime changes",
    )


def evaluate_targets(all_results: Sequence[TraceResults]) -> list[TargetResult]:
    out: list[TargetResult] = []
    for results in all_results:
        if CONTROLLED not in results.runs:
            continue
        if results.trace.sweep:
            out.extend(_steady_targets(results))
            continue
        if results.trace.mixed:
            out.extend(_mixed_targets(results))
        out.append(_flapping_target(results))
    return out


def _ms(seconds: float) -> str:
    return "—" if seconds != seconds else f"{seconds * 1e3:.1f}"


def markdown(
    all_results: Sequence[TraceResults], targets: Sequence[TargetResult], command: str
) -> str:
    lines = [f"Command: `{command}`", ""]
    for results in all_results:
        trace = results.trace
        oracle_goodput = results.summary(ORACLE).goodput
        about = f": {trace.description}" if trace.description else ""
        lines += [
            f"### {trace.name} ({trace.duration_s:.0f} s virtual){about}",
            "",
            f"truth: {results.truth}",
            "",
            "| policy | mean TPOT (ms) | p90 TPOT (ms) | throughput (tok/s) | goodput (tok/s) "
            "| restarts | goodput / oracle |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for policy in results.policies:
            s = results.summary(policy)
            ratio = s.goodput / oracle_goodput if oracle_goodput else float("nan")
            lines.append(
                f"| {policy} | {_ms(s.mean_tpot_s)} | {_ms(s.p90_tpot_s)} | {s.throughput:.0f} "
                f"| {s.goodput:.0f} | {s.restarts} | {ratio:.3f} |"
            )
        lines += ["", f"Oracle per segment: {', '.join(results.oracle_choices)}", ""]
        if trace.sweep:
            lines += _sweep_table(results)
    lines += ["### Targets", "", "| target | trace | result | detail |", "|---|---|---|---|"]
    for t in targets:
        lines.append(f"| {t.target} | {t.trace} | {'PASS' if t.passed else 'FAIL'} | {t.detail} |")
    passed = sum(t.passed for t in targets)
    lines += ["", f"{passed} of {len(targets)} targets met.", ""]
    return "\n".join(lines)


def _sweep_table(results: TraceResults) -> list[str]:
    policies = list(results.runs)
    lines = [
        "Goodput (tok/s) by concurrency:",
        "",
        "| concurrency | " + " | ".join(policies) + " | oracle pick |",
        "|---:|" + "---:|" * len(policies) + "---|",
    ]
    for index, segment in enumerate(results.trace.segments):
        row = [f"{results.runs[p].segments[index].goodput:.0f}" for p in policies]
        lines.append(
            f"| {segment.concurrency} | "
            + " | ".join(row)
            + f" | {results.oracle_choices[index]} |"
        )
    return [*lines, ""]


def results_json(
    all_results: Sequence[TraceResults], targets: Sequence[TargetResult], command: str
) -> dict[str, object]:
    traces: dict[str, object] = {}
    for results in all_results:
        oracle_goodput = results.summary(ORACLE).goodput
        policies: dict[str, object] = {}
        for policy in results.policies:
            s = results.summary(policy)
            entry: dict[str, object] = {
                **asdict(s),
                "goodput_over_oracle": s.goodput / oracle_goodput if oracle_goodput else None,
            }
            if policy != ORACLE:
                run = results.runs[policy]
                entry["segments"] = [
                    {
                        "name": seg.name,
                        "throughput": seg.throughput,
                        "goodput": seg.goodput,
                        "mean_tpot_s": float(np.mean(seg.tpots)) if seg.tpots else None,
                    }
                    for seg in run.segments
                ]
                entry["decisions"] = [asdict(d) for d in run.decisions if d.action != "Keep"]
            policies[policy] = entry
        traces[results.trace.name] = {
            "truth": results.truth,
            "duration_s": results.trace.duration_s,
            "policies": policies,
            "oracle_choices": list(results.oracle_choices),
        }
    return {
        "command": command,
        "traces": traces,
        "targets": [asdict(t) for t in targets],
    }
