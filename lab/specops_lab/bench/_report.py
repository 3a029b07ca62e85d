"""From runs to figures: the oracle, per-trace summaries, the targets, JSON and markdown.

The oracle picks, for every segment of a trace, the run that did best there (goodput,
then throughput) in hindsight among every policy but the controller: each static k,
off, vLLM's documented table, the best table computed on the engine's truth, and the
per-step rule; it switches between them for free, so its figures are those segments'
figures stitched together.

Beside it, the plan that pays restarts: one config vLLM runs per segment, chosen in
hindsight, starting from the controller's day-zero config, where every change leaves one
controller window of its segment to the config before (a decision from measurements must
see the new load first) and then serves nothing for the restart downtime. Its goodput is
the most a controller that measures before it acts and pays restarts could reach, so the
report sets the controller beside it too. Speculation is expected back on
after load falls only where that plan turns it on: where turning it on for a low-load
segment serves less than staying off, restarts included, the controller that stays off is
right.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from specops_lab.bench._run import RunResult, SegmentStats
from specops_lab.bench._spec import LoadTrace

__all__ = [
    "ORACLE",
    "DecisionCost",
    "Summary",
    "TargetResult",
    "TraceResults",
    "cross_table",
    "decision_cost",
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
        goodput=sum(_served(s) for s in segments) / duration,
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
    restart_plan: tuple[str, ...] = ()
    reachable_goodput: float | None = None

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


def oracle(
    trace: LoadTrace,
    runs: Mapping[str, RunResult],
    fixed: Sequence[str],
    *,
    runnable: Sequence[str] = (),
    restart_s: float = 0.0,
    react_s: float = 0.0,
    start: str | None = None,
) -> TraceResults:
    """Best of the ``fixed`` runs per segment, in hindsight, switching for free; and the
    plan among the ``runnable`` ones (configs vLLM runs) that reacts ``react_s`` into a
    segment and pays ``restart_s`` a change, from ``start`` (the day-zero config's run)."""
    if not fixed:
        raise ValueError("the oracle needs at least one fixed-config run")
    chosen: list[str] = []
    stitched: list[SegmentStats] = []
    for index in range(len(trace.segments)):
        best = max(fixed, key=lambda name: _rank(runs[name].segments[index]))
        chosen.append(best)
        stitched.append(runs[best].segments[index])
    plan, served = _restart_plan(
        len(trace.segments), runs, runnable, _Change(restart_s, react_s), start
    )
    seconds = sum(s.end - s.start for s in stitched)
    reachable = served / seconds if plan and seconds > 0 else None
    return TraceResults(trace, runs, tuple(fixed), tuple(stitched), tuple(chosen), plan, reachable)


@dataclass(frozen=True)
class _Change:
    """What a change of config costs a plan: ``react_s`` of its segment still served by
    the config before (a measurement must see the new load first), then ``restart_s``
    that serves nothing, into the following segments where it runs past its own."""

    restart_s: float
    react_s: float = 0.0

    def served(
        self, before: SegmentStats, after: SegmentStats, down_s: float
    ) -> tuple[float, float]:
        """Goodput tokens of ``after``'s segment when the change is ordered there, with
        ``down_s`` of an earlier restart still to run (no restart starts before it ends),
        and the downtime left at the segment's end."""
        seconds = after.end - after.start
        begin = min(max(self.react_s, down_s), seconds)
        up = begin + self.restart_s
        served = before.goodput * max(begin - down_s, 0.0)
        return served + after.goodput * max(seconds - up, 0.0), max(up - seconds, 0.0)


def _kept(segment: SegmentStats, down_s: float) -> tuple[float, float]:
    """Goodput tokens of a segment that keeps the config before, ``down_s`` of a restart
    still to run, and the downtime left at its end."""
    seconds = segment.end - segment.start
    return segment.goodput * max(seconds - down_s, 0.0), max(down_s - seconds, 0.0)


# per (config a plan ends with, restart downtime it has still to run): (goodput tokens,
# -changes), the plan
_Plans = dict[tuple[str, float], tuple[tuple[float, int], tuple[str, ...]]]


def _restart_plan(
    segments: int,
    runs: Mapping[str, RunResult],
    names: Sequence[str],
    change: _Change,
    start: str | None = None,
) -> tuple[tuple[str, ...], float]:
    """One of ``names`` per segment, serving the most goodput in hindsight when each change
    costs what ``change`` says (a dynamic programme), and the goodput tokens it serves. A
    run ``start`` is where the plan stands before the first segment: leaving it there is
    a change too. Of plans that serve as much, the one with the fewest changes: where no
    config serves any goodput (an overload beyond the TPOT target), the plan keeps what
    ran rather than change for nothing."""
    best: _Plans = {(start, 0.0): ((0.0, 0), ())} if start is not None and start in names else {}
    for index in range(segments):
        step: _Plans = {}
        for name in names:
            ways = [
                (_continued(score, runs, previous, name, index, change, down_s), (*plan, name))
                for (previous, down_s), (score, plan) in best.items()
            ] or [(((_served(runs[name].segments[index]), 0), 0.0), (name,))]
            for (score, left), plan in ways:
                if (name, left) not in step or score > step[name, left][0]:
                    step[name, left] = (score, plan)
        best = _undominated(step)
    if not best:
        return (), 0.0
    (value, _), plan = max(best.values(), key=lambda found: found[0])
    return plan, value


def _undominated(plans: _Plans) -> _Plans:
    """The plans no other plan ending with the same config beats on both its score and
    the downtime it has left: the rest can never come out ahead."""
    return {
        (name, left): (score, plan)
        for (name, left), (score, plan) in plans.items()
        if not any(
            other == name and other_left <= left and other_score >= score
            for (other, other_left), (other_score, _) in plans.items()
            if (other, other_left) != (name, left)
        )
    }


def _served(segment: SegmentStats) -> float:
    """The goodput tokens the segment served."""
    return segment.goodput * (segment.end - segment.start)


def _continued(
    score: tuple[float, int],
    runs: Mapping[str, RunResult],
    previous: str,
    name: str,
    index: int,
    change: _Change,
    down_s: float,
) -> tuple[tuple[float, int], float]:
    """A plan's (goodput tokens, -changes) once segment ``index`` runs ``name`` after
    ``previous`` with ``down_s`` of a restart still to run, and the downtime left."""
    value, changes = score
    segment = runs[name].segments[index]
    if previous == name:
        served, left = _kept(segment, down_s)
        return (value + served, changes), left
    served, left = change.served(runs[previous].segments[index], segment, down_s)
    return (value + served, changes - 1), left


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


def _statics(results: TraceResults) -> list[str]:
    """The single-config runs among the fixed ones: off and each static k."""
    return [p for p in results.fixed if p == "off" or (p.startswith("k") and p[1:].isdigit())]


def _steady_targets(results: TraceResults) -> list[TargetResult]:
    """Per concurrency: never more than 2 % below no speculation, and within 3 % of the
    best single config (off or a static k; the per-step rule and the truth's tables are
    the oracle's, not static). Where no config meets the TPOT target at all, the
    controller cannot be below it."""
    out = []
    controlled = results.runs[CONTROLLED]
    statics = _statics(results)
    for index, segment in enumerate(results.trace.segments):
        where = f"{results.trace.name}@c{segment.concurrency}"
        mine = controlled.segments[index].goodput
        if "off" in results.runs:
            off = results.runs["off"].segments[index].goodput
            out.append(
                TargetResult(
                    "steady: never more than 2% below no speculation",
                    where,
                    mine >= 0.98 * off,
                    f"specops {mine:.0f} tok/s goodput, off {off:.0f}"
                    + (f" ({mine / off:.3f})" if off else ""),
                )
            )
        if not statics:
            continue
        best_name = max(statics, key=lambda n: results.runs[n].segments[index].goodput)
        best = results.runs[best_name].segments[index].goodput
        out.append(
            TargetResult(
                "steady: within 3% of the best static config",
                where,
                mine >= 0.97 * best,
                f"specops {mine:.0f} tok/s goodput = "
                + (f"{mine / best:.3f} of" if best else "no config meets the target;")
                + f" best static ({best_name}, {best:.0f})",
            )
        )
    # Each steady run starts from day zero's k: one move to the load's config is the answer
    # to the regime starting, a second is flapping.
    per_run = [0] * len(results.trace.segments)
    starts = [0.0]
    for segment in results.trace.segments:
        starts.append(starts[-1] + segment.duration_s)
    for d in controlled.decisions:
        if d.action in ("Reconfigure", "Rollback"):
            per_run[max(i for i, s in enumerate(starts[:-1]) if s <= d.at)] += 1
    out.append(
        TargetResult(
            "no flapping: <= 1 reconfiguration per steady run (from day zero)",
            results.trace.name,
            max(per_run, default=0) <= 1,
            f"{controlled.restarts} reconfigurations over {len(per_run)} steady runs "
            f"(most in one run: {max(per_run, default=0)})",
        )
    )
    return out


def _versus(mine: float, other: float) -> str:
    """The controller's goodput against another's as a relative change, or why there is
    none: a policy that serves no goodput (none of its tokens within the TPOT target)
    has no ratio."""
    return f"{mine / other - 1:+.1%}" if other else "no goodput within the TPOT target"


def _mixed_targets(results: TraceResults) -> list[TargetResult]:
    name = results.trace.name
    mine = results.summary(CONTROLLED).goodput
    best_oracle = results.summary(ORACLE).goodput
    statics = _statics(results)
    reachable = results.reachable_goodput
    bound = (
        f"; hindsight's best plan, a window late and paying restarts from day zero, "
        f"reaches {reachable / best_oracle:.3f} of it, specops {mine / reachable:.3f} of that"
        if reachable and best_oracle
        else ""
    )
    out = [
        TargetResult(
            "mixed: >= 0.95 of the oracle's goodput",
            name,
            mine >= 0.95 * best_oracle,
            f"specops {mine:.0f} / oracle {best_oracle:.0f} = {mine / best_oracle:.3f}{bound}"
            if best_oracle
            else f"specops {mine:.0f}, oracle 0: no config meets the TPOT target on this trace",
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
                f"specops {mine:.0f} vs {best_static} {static:.0f} ({_versus(mine, static)})"
                + (
                    f"; hindsight's best plan from day zero {reachable:.0f} "
                    f"({_versus(reachable, static)})"
                    if reachable
                    else ""
                ),
            )
        )
    if VLLM_TABLE in results.runs:
        table = results.summary(VLLM_TABLE).goodput
        out.append(
            TargetResult(
                "mixed: ahead of vLLM's documented table",
                name,
                mine > table,
                f"specops {mine:.0f} vs {VLLM_TABLE} {table:.0f} ({_versus(mine, table)})",
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


def _first(
    timeline: Sequence[tuple[float, int, int]], start: float, end: float, off: bool
) -> float | None:
    """When, in [start, end), the engine first ran with speculation off (or on)."""
    return next(
        (t for t, running, k in timeline if start <= t < end and running > 0 and (k == 0) == off),
        None,
    )


def _crossover_targets(
    results: TraceResults, window_s: float, restart_s: float
) -> list[TargetResult]:
    """Off within three windows where the oracle is off, back on within three after.

    Each is expected only where it pays its restarts on the truth: where the plan that
    pays them (a window late, from day zero) keeps what ran before, the controller that
    keeps it is not marked down. Off is skipped where that plan stays on (at a load no
    config serves within the TPOT target, the oracle's off wins on throughput alone), back
    on where it stays off.
    """
    trace = results.trace
    timeline = results.runs[CONTROLLED].timeline
    starts = [0.0]
    for segment in trace.segments:
        starts.append(starts[-1] + segment.duration_s)
    allowed = 3 * window_s + restart_s
    out = []
    for index, choice in enumerate(results.oracle_choices):
        previous = results.oracle_choices[index - 1] if index else None
        want_off = choice == "off"
        if want_off == (previous == "off"):
            continue  # the oracle neither turns speculation off nor back on here
        if results.restart_plan and (results.restart_plan[index] == "off") != want_off:
            continue  # on the truth, keeping what ran serves as much, restarts included
        start, end = starts[index], starts[index + 1]
        found = _first(timeline, start, end, want_off)
        when = "never" if found is None else f"after {found - start:.0f} s"
        out.append(
            TargetResult(
                f"crossover: speculation {'off' if want_off else 'back on'} within three "
                "windows (plus a restart)",
                f"{trace.name}:{trace.segments[index].name(index)}",
                found is not None and found - start <= allowed,
                f"{'off' if want_off else 'on'} {when} (allowed {allowed:.0f} s)",
            )
        )
    return out


def evaluate_targets(
    all_results: Sequence[TraceResults], window_s: float = 60.0, restart_s: float = 60.0
) -> list[TargetResult]:
    out: list[TargetResult] = []
    for results in all_results:
        if CONTROLLED not in results.runs:
            continue
        if results.trace.sweep:
            out.extend(_steady_targets(results))
            continue
        if results.trace.mixed:
            out.extend(_mixed_targets(results))
        out.extend(_crossover_targets(results, window_s, restart_s))
        out.append(_flapping_target(results))
    return out


def _ratio(results: TraceResults, policy: str | None) -> str:
    """The controller's goodput over ``policy``'s, or a dash when there is none."""
    if policy is None or policy not in results.policies:
        return "—"
    other = results.summary(policy).goodput
    return f"{results.summary(CONTROLLED).goodput / other:.3f}" if other else "—"


def _reachable(results: TraceResults) -> str:
    """The controller's goodput over the best plan that pays restarts, or a dash."""
    reachable = results.reachable_goodput
    if not reachable:
        return "—"
    return f"{results.summary(CONTROLLED).goodput / reachable:.3f}"


def cross_table(all_results: Sequence[TraceResults]) -> list[str]:
    """Every (trace, truth): the controller against the oracle, the best plan that pays
    restarts, the best static k, vLLM's documented table and no speculation, on goodput."""
    lines = [
        "### The controller on every trace and truth (goodput ratios)",
        "",
        "| trace | truth | / oracle | / reachable | / best static | / vllm-table | / off "
        "| restarts |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for results in all_results:
        if CONTROLLED not in results.runs:
            continue
        mine = results.summary(CONTROLLED)
        statics = _statics(results)

        best = max(statics, key=lambda p: results.summary(p).goodput, default=None)
        name = results.trace.name.split("@")[0]
        lines.append(
            f"| {name} | {results.truth} | {_ratio(results, ORACLE)} | {_reachable(results)} "
            f"| {_ratio(results, best)} "
            f"| {_ratio(results, VLLM_TABLE)} | {_ratio(results, 'off')} | {mine.restarts} |"
        )
    return [*lines, ""]


@dataclass(frozen=True)
class DecisionCost:
    """What the controller's decisions cost in CPU over every run: their count, mean, median,
    99th percentile and largest, in seconds (the benchmark's process clock on this machine)."""

    decisions: int
    mean_s: float
    median_s: float
    p99_s: float
    max_s: float

    def services_per_core(self, window_s: float) -> float:
        """How many services one core decides for at one decision a window, on average."""
        return window_s / self.mean_s if self.mean_s > 0 else float("inf")


def decision_cost(all_results: Sequence[TraceResults]) -> DecisionCost | None:
    """The controller's decision CPU over every trace and truth; None without a decision."""
    seconds = [
        cpu
        for results in all_results
        if CONTROLLED in results.runs
        for cpu in results.runs[CONTROLLED].decide_cpu_s
    ]
    if not seconds:
        return None
    values = np.asarray(seconds)
    return DecisionCost(
        decisions=len(seconds),
        mean_s=float(values.mean()),
        median_s=float(np.median(values)),
        p99_s=float(np.quantile(values, 0.99)),
        max_s=float(values.max()),
    )


def decision_cost_lines(cost: DecisionCost | None, window_s: float) -> list[str]:
    """The decision cost in words, with the fleet one core can carry at that cost."""
    if cost is None:
        return []
    return [
        "### What a decision costs",
        "",
        f"{cost.decisions} decisions of {CONTROLLED} over every trace and truth took "
        f"{_ms(cost.mean_s)} ms of CPU on average (median {_ms(cost.median_s)}, p99 "
        f"{_ms(cost.p99_s)}, largest {_ms(cost.max_s)}), measured by the process clock around "
        f"each decision on this machine: at one decision a {window_s:.0f} s window, one core "
        f"decides for about {cost.services_per_core(window_s):.0f} services.",
        "",
    ]


def _ms(seconds: float) -> str:
    return "—" if seconds != seconds else f"{seconds * 1e3:.1f}"


def markdown(
    all_results: Sequence[TraceResults],
    targets: Sequence[TargetResult],
    command: str,
    window_s: float,
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
        if results.restart_plan:
            lines += [
                "Reacting a window into each segment and paying restarts from day zero's config, "
                "the best configs vLLM runs: "
                f"{', '.join(results.restart_plan)} ({results.reachable_goodput or 0.0:.0f} "
                "tok/s of goodput)",
                "",
            ]
        if trace.sweep:
            lines += _sweep_table(results)
    lines += cross_table(all_results)
    lines += decision_cost_lines(decision_cost(all_results), window_s)
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
            "restart_plan": list(results.restart_plan),
            "reachable_goodput": results.reachable_goodput,
        }
    cost = decision_cost(all_results)
    return {
        "command": command,
        "traces": traces,
        "targets": [asdict(t) for t in targets],
        "decision_cpu": asdict(cost) if cost is not None else None,
    }
