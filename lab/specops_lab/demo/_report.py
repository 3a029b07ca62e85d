"""The demo's closing report, as markdown, PNG plots and a JSON summary.

It opens with what happened in plain words, taken from the virtual-time replay of the day
(every policy on one engine truth, one clock), then the comparison itself, then the live
run reported as what it is: the controller's decisions on the real control plane, the load
the engines actually held, and how faithful the live engines were to the truth.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from specops_lab.bench import LoadTrace, Summary
from specops_lab.demo._live import HeldLoad, LiveFigures, phase_of
from specops_lab.demo._replay import CONTROLLED, OFF, ORACLE, VLLM_TABLE, Replay
from specops_lab.demo._snapshot import DecisionView, Snapshot, short_time

__all__ = [
    "EventView",
    "RunRecord",
    "decisions_of",
    "first_paragraph",
    "markdown",
    "plot",
    "summary_json",
]


@dataclass(frozen=True)
class EventView:
    """A Kubernetes Event on the SpeculativeService."""

    time: str
    reason: str
    message: str


@dataclass(frozen=True)
class RunRecord:
    trace: LoadTrace
    snapshots: tuple[Snapshot, ...]
    events: tuple[EventView, ...]
    live: LiveFigures
    replay: Replay
    timings: tuple[tuple[str, float], ...]
    service: str


def decisions_of(snapshots: Sequence[Snapshot]) -> tuple[DecisionView, ...]:
    """Each distinct decision the snapshots saw, in order (status holds only the last one)."""
    seen: dict[tuple[str, str, str], DecisionView] = {}
    for snapshot in snapshots:
        decision = snapshot.decision
        if decision is not None:
            seen.setdefault((decision.time, decision.action, decision.reason), decision)
    return tuple(seen.values())


# Event reasons of a change of speculative config (the rest repeat the decisions above).
_CHANGE_EVENTS = ("Reconfigure", "Rollback")
_CHANGES = ("Reconfigure", "Rollback")


def _runs(decisions: Sequence[DecisionView]) -> list[tuple[DecisionView, int]]:
    """Consecutive decisions with the same action and code as one: the first, and how many."""
    runs: list[tuple[DecisionView, int]] = []
    for decision in decisions:
        if runs and (runs[-1][0].action, runs[-1][0].reason_code) == (
            decision.action,
            decision.reason_code,
        ):
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((decision, 1))
    return runs


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None or seconds != seconds else f"{seconds * 1e3:.2f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d}"


def _k_words(k: int) -> str:
    return "off" if k == 0 else f"k={k}"


def _k_of(config: str) -> int:
    """k of ``k=5`` or the cap of ``k<=5 [...]``; 0 for ``off`` or unknown."""
    digits = config.removeprefix("k<=").removeprefix("k=").split(" ", 1)[0]
    return int(digits) if digits.isdigit() else 0


def _gain(mine: float, theirs: float) -> float:
    return mine / theirs - 1.0 if theirs > 0 else float("nan")


def _against(mine: float, theirs: float, name: str) -> str:
    gain = _gain(mine, theirs)
    if gain != gain:
        return f"no figure against {name}"
    if abs(gain) < 0.005:
        return f"level with {name}"
    if gain >= 0:
        return f"{gain:+.0%} over {name}"
    return f"{-gain:.0%} below {name}"


def _k_changes(snapshots: Sequence[Snapshot]) -> list[tuple[float, str]]:
    changes: list[tuple[float, str]] = []
    for snapshot in snapshots:
        if not changes or changes[-1][1] != snapshot.deployment:
            changes.append((snapshot.elapsed_s, snapshot.deployment))
    return changes


# -- the replay in words ---------------------------------------------------------------


def _policy_words(replay: Replay, name: str) -> str:
    if name == OFF:
        return "no speculation"
    if name == VLLM_TABLE:
        return "vLLM's documented table"
    if name == ORACLE:
        return "the oracle"
    if name == replay.best_static:
        return f"the best static k ({name.removeprefix('k')})"
    return name


def _running_at(replay: Replay, at: float) -> int | None:
    running = [r for t, r, _ in replay.controlled.timeline if t <= at]
    return running[-1] if running else None


def _crossover_words(bands: dict[int, tuple[int | None, int | None]], batch: int, k: int) -> str:
    low, high = bands.get(k, (None, None))
    band = (
        ""
        if low is None and high is None
        else f"; 10-90 % band: {low or '-'} to " + ("beyond the cap" if high is None else str(high))
    )
    return f"batch {batch} (k={k}{band})"


def _last_crossover(
    crossovers: Sequence[tuple[int, int | None]],
) -> tuple[int, int] | None:
    """(k, batch) of the crossover above which no k pays, when every k has one."""
    if not crossovers or any(batch is None for _, batch in crossovers):
        return None
    k, batch = max(crossovers, key=lambda c: c[1] or 0)
    return (k, batch) if batch is not None else None


def _replay_changes(replay: Replay) -> list[str]:
    """The controlled run's changes, each in a few words."""
    phase = phase_of(replay.trace)
    words = []
    before = replay.initial_k
    for d in replay.controlled.decisions:
        if d.action not in _CHANGES:
            continue
        running = _running_at(replay, d.at)
        where = phase(d.at) + ("" if running is None else f", {running} running")
        last = _last_crossover(d.crossovers)
        if d.k == 0 and last is not None:
            where += (
                f", above the measured crossover: no k pays above batch {last[1]} (k={last[0]})"
            )
        elif d.code == "ProbeUnmeasuredK":
            where += "; a probe of a k whose step time was never measured"
        if d.k == 0:
            turned = "turned speculation off"
        elif before == 0:
            turned = f"back on ({_k_words(d.k)})"
        else:
            turned = f"went to {_k_words(d.k)}"
        words.append(f"{turned} at {_clock(d.at)} ({where})")
        before = d.k
    return words


def first_paragraph(record: RunRecord) -> str:
    """What happened, in plain words, from the virtual-time replay (naming the truth),
    then a sentence on the live run."""
    replay = record.replay
    trace = record.trace
    mine = replay.summary(CONTROLLED)
    changes = _replay_changes(replay)
    if not changes:
        did = "kept its starting config all day"
    elif len(changes) == 1:
        did = changes[0]
    else:
        did = ", ".join(changes[:-1]) + " and " + changes[-1]
    against = ", ".join(
        _against(mine.goodput, replay.summary(name).goodput, _policy_words(replay, name))
        for name in replay.baselines
        if name != ORACLE
    )
    oracle = replay.summary(ORACLE).goodput
    share = (
        f"{mine.goodput / oracle:.0%} of the oracle's goodput" if oracle > 0 else "no oracle figure"
    )
    phases = []
    for label in replay.phases():
        ours = replay.phase_summary(CONTROLLED, label).goodput
        off = replay.phase_summary(OFF, label).goodput
        best = replay.phase_summary(ORACLE, label).goodput
        phases.append(
            f"{label} {_against(ours, off, 'no speculation')} ({ours / best:.0%} of the oracle)"
            if best > 0
            else f"{label} -"
        )
    text = (
        f"On the engine truth `{replay.truth}`, the demo's day ({trace.duration_s / 60:g}"
        f" minutes: {trace.description or trace.name}) replayed in virtual time for every"
        f" policy. specops, the operator's own controller with each restart charged"
        f" ({replay.restart_s:g} s), started at {_k_words(replay.initial_k)}, {did}."
        f" Over the day it delivered {mine.goodput:.0f} tokens/s of goodput:"
        f" {against}, {share}. By phase: {'; '.join(phases)}. Each change first waits for"
        f" the new load to hold over two measurement windows ({replay.window_s:g} s each)"
        f" and then restarts the pods: a large share of a compressed phase, a small one of"
        f" a real day's."
    )
    return text + " " + _live_sentence(record)


def _first_seen(snapshots: Sequence[Snapshot]) -> dict[str, float]:
    """Seconds into the day at which each decision (by its time stamp) was first shown."""
    seen: dict[str, float] = {}
    for snapshot in snapshots:
        if snapshot.decision is not None:
            seen.setdefault(snapshot.decision.time, snapshot.elapsed_s)
    return seen


def _live_sentence(record: RunRecord) -> str:
    live = record.live
    every = decisions_of(record.snapshots)
    seen = _first_seen(record.snapshots)
    changes = [d for d in every if d.applied and d.action in _CHANGES]
    turns = (
        ", ".join(f"{d.recommended or '?'} at {_clock(seen.get(d.time, 0.0))}" for d in changes)
        or "no change"
    )
    peak = live.peak
    held = (
        ""
        if peak is None
        else f" At {peak.phase} the engines held {_number(peak.engine, 0)} of the"
        f" {peak.wanted:.0f} requests wanted (the client had {peak.client:.0f} in flight)."
    )
    ratio = live.fidelity.ratio()
    fidelity = (
        " No busy interval was measured for the fidelity check."
        if ratio is None
        else f" The live engines' steps took {ratio:.2f}x the time the truth gives the same"
        f" configs and loads ({live.fidelity.intervals} intervals)."
    )
    return (
        f"Live, on the real control plane, the controller reconfigured to {turns};"
        f" {live.completed} requests completed, {live.failed} failed.{held}{fidelity}"
    )


# -- tables ------------------------------------------------------------------------------


def _role(replay: Replay, name: str) -> str:
    return {
        CONTROLLED: "specops: the controller, restarts charged",
        OFF: "no speculation",
        VLLM_TABLE: "vLLM's documented per-batch table",
        ORACLE: "best config per slice in hindsight, switching free",
        "turbospec": "per-step goodput rule",
    }.get(
        name,
        "best static k"
        if name == replay.best_static
        else ("best table on the truth" if name.startswith("truth-table") else "static k"),
    )


def _summary_row(replay: Replay, name: str, summary: Summary, oracle: float) -> str:
    ratio = summary.goodput / oracle if oracle else float("nan")
    return (
        f"| {name} | virtual | `{replay.truth}` | {_role(replay, name)} |"
        f" {_ms(summary.mean_tpot_s)} | {_ms(summary.p90_tpot_s)} | {summary.throughput:.0f} |"
        f" {summary.goodput:.0f} | {summary.restarts} | {ratio:.3f} |"
    )


def _comparison(replay: Replay) -> list[str]:
    oracle = replay.summary(ORACLE).goodput
    lines = [
        "## The day in virtual time, every policy",
        "",
        f"One clock for every row: the same day replayed on the simulated engine in virtual"
        f" time, on the engine truth `{replay.truth}` and workload `{replay.trace.workload}`"
        f" (`specops bench`'s machinery; the controller is given a profile, not the truth).",
        "",
        "| policy | clock | truth | what | mean TPOT ms | p90 TPOT ms | throughput tok/s"
        " | goodput tok/s | restarts | goodput / oracle |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in replay.policies():
        lines.append(_summary_row(replay, name, replay.summary(name), oracle))
    lines += ["", "Goodput (tokens/s) by phase of the day:", ""]
    shown = (CONTROLLED, *replay.baselines)
    lines += [
        "| phase | " + " | ".join(shown) + " | specops vs no speculation |",
        "|---|" + "---:|" * (len(shown) + 1),
    ]
    for label in replay.phases():
        figures = [replay.phase_summary(name, label).goodput for name in shown]
        off = replay.phase_summary(OFF, label).goodput
        lines.append(
            f"| {label} | "
            + " | ".join(f"{f:.0f}" for f in figures)
            + f" | {_gain(figures[0], off):+.1%} |"
        )
    lines += ["", *_replay_decisions(replay), ""]
    return lines


def _replay_decisions(replay: Replay) -> list[str]:
    phase = phase_of(replay.trace)
    rows = [d for d in replay.controlled.decisions if d.action != "Keep"]
    if not rows:
        return ["The controller kept its starting config all day in the replay."]
    lines = [
        "Decisions of the controller in the replay (Keep left out):",
        "",
        "| time | phase | action | code | k after | running | no k pays above |",
        "|---|---|---|---|---|---:|---|",
    ]
    for d in rows:
        last = _last_crossover(d.crossovers)
        running = _running_at(replay, d.at)
        lines.append(
            f"| {_clock(d.at)} | {phase(d.at)} | {d.action} | {d.code or '-'} |"
            f" {_k_words(d.k)} | {'-' if running is None else running} |"
            f" {'-' if last is None else f'batch {last[1]} (k={last[0]})'} |"
        )
    return lines


def _live_decisions(record: RunRecord) -> list[str]:
    lines = [
        "## The live run on the control plane",
        "",
        "What the controller decided on the real control plane (the operator, the chart's"
        " RBAC, simulated vLLM pods on fake GPU nodes); its engines run in real time on"
        " this machine's CPUs, so their figures are a check of the live stack, not a row"
        " of the comparison above.",
        "",
    ]
    every = decisions_of(record.snapshots)
    seen = _first_seen(record.snapshots)
    runs = [run for run in _runs(every) if run[0].action != "Keep"]
    if runs:
        lines += [
            "| time | into the day | action | code | recommended | applied | gain % | in a row"
            " | reason |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for d, count in runs:
            gain = "-" if d.predicted_gain_percent is None else f"{d.predicted_gain_percent:+.1f}"
            into = "-" if d.time not in seen else _clock(seen[d.time])
            lines.append(
                f"| {short_time(d.time)} | {into} | {d.action} | {d.reason_code or '-'} |"
                f" {d.recommended or '-'} |"
                f" {'yes' if d.applied else 'no'} | {gain} | {count} | {_escape(d.reason)} |"
            )
    else:
        lines.append("No reconfiguration or withheld change was recorded.")
    outcomes = Counter(f"{d.action}/{d.reason_code or '-'}" for d in every)
    lines += [
        "",
        "Decisions seen, by outcome: "
        + (", ".join(f"{name} x{n}" for name, n in sorted(outcomes.items())) or "none")
        + ".",
        "",
    ]
    changes = _k_changes(record.snapshots)
    if changes:
        lines.append("Speculative config of the Deployment over the run: ")
        lines.append(", ".join(f"{config} from {at:.0f} s" for at, config in changes) + ".")
        lines.append("")
    changing = [e for e in record.events if e.reason in _CHANGE_EVENTS]
    lines += [
        f"Events on the SpeculativeService: {len(record.events)}; those of its changes:",
        "",
        *(f"- {e.time} {e.reason}: {_escape(e.message)}" for e in changing),
        "",
    ]
    return lines


def _held_row(held: HeldLoad) -> str:
    share = held.engine_share
    return (
        f"| {held.phase} | {held.wanted:.1f} | {held.client:.1f} | {_number(held.engine)} |"
        f" {'-' if share is None else f'{share:.0%}'} |"
    )


def _held(live: LiveFigures) -> list[str]:
    request_time = (
        ""
        if live.engine_by_request_time is None
        else f" By the engines' own request time over wall time, they held"
        f" {live.engine_by_request_time:.1f} over the whole day."
    )
    return [
        "### The load it was given",
        "",
        "Requests in flight: what the day wanted, what the load driver had in flight (its"
        " requests' time over wall time) and what the engines held by their own gauges"
        " (vLLM's running + waiting, scraped by Prometheus every 2 s).",
        "",
        "| phase | wanted | client in flight | engines in flight | engines / wanted |",
        "|---|---:|---:|---:|---:|",
        *(_held_row(h) for h in live.held),
        _held_row(live.day),
        "",
        f"{live.completed} requests completed, {live.failed} failed.{request_time} Where the"
        " load falls the client holds more than the day wants: requests begun before the"
        " fall run to their end (the driver cancels none).",
        "",
    ]


def _fidelity(live: LiveFigures, phases: Sequence[str]) -> list[str]:
    fidelity = live.fidelity
    ratio = fidelity.ratio()
    lines = [
        "### Fidelity of the live stack",
        "",
        "The live engines' wall time per step while busy (their own step counter's rate)"
        f" against the step time the truth `{fidelity.truth}` gives the same config and the"
        " same measured load (decoding requests, draft length, prefill tokens and context"
        " per step), over the same steps; above 1 the live engines ran slower than the"
        " physics they simulate (processes waiting for a CPU).",
        "",
        "| phase | k run | decoding requests | measured step ms | truth step ms | ratio |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label in phases:
        for k in fidelity.ks(label):
            lines.append(
                f"| {label} | {_k_words(k)} | {_number(fidelity.mean('batch', label, k))} |"
                f" {_ms(fidelity.mean('measured_s', label, k))} |"
                f" {_ms(fidelity.mean('predicted_s', label, k))} |"
                f" {_number(fidelity.ratio(label, k), 2)} |"
            )
    lines += [
        "",
        "Live fidelity ratio (measured / truth, all busy intervals): "
        + ("-" if ratio is None else f"{ratio:.2f}")
        + f" over {fidelity.intervals} intervals.",
        "",
    ]
    return lines


def markdown(record: RunRecord, plots: Sequence[Path]) -> str:
    """The report: what happened, the comparison in virtual time, the live run, timings."""
    trace = record.trace
    lines = [
        "# specops demo report",
        "",
        first_paragraph(record),
        "",
        f"SpeculativeService `{record.service}`, {trace.duration_s / 60:g} minutes of"
        f" {trace.description or trace.name} on workload `{trace.workload}`.",
        "",
    ]
    if plots:
        lines += [*(f"![{p.stem}]({p.name})" for p in plots), ""]
    lines += _comparison(record.replay)
    lines += _live_decisions(record)
    lines += _held(record.live)
    lines += _fidelity(record.live, record.replay.phases())
    lines += [
        "## Timings",
        "",
        "| step | seconds |",
        "|---|---|",
        *(f"| {name} | {seconds:.1f} |" for name, seconds in record.timings),
        "",
    ]
    return "\n".join(lines)


def summary_json(record: RunRecord) -> dict[str, Any]:
    """The report's figures for programs: the comparison rows, both runs' decisions, the
    load held and the fidelity ratio."""
    replay = record.replay
    live = record.live

    def row(name: str) -> dict[str, Any]:
        s = replay.summary(name)
        return {
            "policy": name,
            "clock": "virtual",
            "truth": replay.truth,
            "mean_tpot_s": s.mean_tpot_s,
            "throughput": s.throughput,
            "goodput": s.goodput,
            "restarts": s.restarts,
        }

    def held(h: HeldLoad) -> dict[str, Any]:
        return {"phase": h.phase, "wanted": h.wanted, "client": h.client, "engine": h.engine}

    return {
        "truth": replay.truth,
        "comparison": [row(name) for name in replay.policies()],
        "best_static": replay.best_static,
        "replay_decisions": [
            {"at": d.at, "action": d.action, "code": d.code, "k": d.k}
            for d in replay.controlled.decisions
            if d.action != "Keep"
        ],
        "live_decisions": [
            {
                "time": d.time,
                "action": d.action,
                "code": d.reason_code,
                "recommended": d.recommended,
                "applied": d.applied,
            }
            for d in decisions_of(record.snapshots)
            if d.action != "Keep"
        ],
        "held": [held(h) for h in live.held],
        "held_day": held(live.day),
        "engine_by_request_time": live.engine_by_request_time,
        "fidelity_ratio": live.fidelity.ratio(),
        "fidelity_intervals": live.fidelity.intervals,
        "completed": live.completed,
        "failed": live.failed,
    }


# -- plots -------------------------------------------------------------------------------


def _crossover_spans(
    replay: Replay, end: float
) -> list[tuple[float, float, float, tuple[float, float] | None]]:
    """(from, to, batch, band) of the batch above which no k pays, from each replay
    decision that measured crossovers until the next one; a span where some k pays at
    every batch size is left out, and so is a band that says nothing (from batch 1, or
    beyond the cap)."""
    measured = [d for d in replay.controlled.decisions if d.crossovers]
    spans = []
    for d, following in zip(measured, [*measured[1:], None], strict=True):
        last = _last_crossover(d.crossovers)
        if last is None:
            continue
        k, batch = last
        low, high = {kk: (lo, hi) for kk, lo, hi in d.crossover_bands}.get(k, (None, None))
        band = (float(low), float(high)) if low and low > 1 and high is not None else None
        spans.append((d.at, following.at if following else end, float(batch), band))
    return spans


def _live_crossover(decision: DecisionView) -> float:
    """The batch above which no k pays, as the live decision measured it (NaN: none)."""
    last = decision.last_crossover
    return float("nan") if last is None or last.batch is None else float(last.batch)


def _load_axis(ax: Axes, record: RunRecord) -> None:
    replay = record.replay
    timeline = replay.controlled.timeline
    trace_times = [t for t, _, _ in timeline]
    ax.plot(
        trace_times, [r for _, r, _ in timeline], label="running, replay (virtual time)", lw=1.2
    )
    if record.live.in_flight:
        ax.plot(
            [t for t, _ in record.live.in_flight],
            [v for _, v in record.live.in_flight],
            label="in the engines, live (running + waiting)",
            lw=1.0,
            alpha=0.8,
        )
    snaps = record.snapshots
    ax.plot(
        [s.elapsed_s for s in snaps],
        [s.load.target for s in snaps],
        label="wanted (the day)",
        color="grey",
        ls="--",
        lw=0.8,
    )
    spans = _crossover_spans(replay, record.trace.duration_s)
    for start, end, batch, band in spans:
        ax.hlines(batch, start, end, color="red", lw=1.5)
        if band is not None:
            ax.fill_between([start, end], *band, color="red", alpha=0.12, lw=0)
    if spans:
        ax.plot(
            [], [], color="red", label="measured crossover, replay: no k pays above (10-90 % band)"
        )
    live = [(s.elapsed_s, _live_crossover(s.decision)) for s in snaps if s.decision is not None]
    if any(b == b for _, b in live):
        ax.step(
            [t for t, _ in live],
            [b for _, b in live],
            where="post",
            color="darkred",
            ls=":",
            label="measured crossover, live controller",
        )
    ax.set_ylabel("requests")
    ax.legend(loc="upper left", fontsize="x-small")


def _k_axis(ax: Axes, record: RunRecord) -> None:
    replay = record.replay
    timeline = replay.controlled.timeline
    # Before its first step the engine has run no k: it starts at the initial one.
    first = next((i for i, (_, running, _) in enumerate(timeline) if running > 0), 0)
    ax.step(
        [t for t, _, _ in timeline],
        [replay.initial_k if i < first else k for i, (_, _, k) in enumerate(timeline)],
        where="post",
        label="k run, replay (0: off)",
    )
    snaps = record.snapshots
    ax.step(
        [s.elapsed_s for s in snaps],
        [_k_of(s.deployment) for s in snaps],
        where="post",
        ls="--",
        label="k of the Deployment, live",
    )
    for d in replay.controlled.decisions:
        if d.action in _CHANGES:
            ax.axvline(d.at, color="grey", ls=":", lw=0.8)
    ax.set_ylabel("k (0: off)")
    ax.set_xlabel("seconds into the day")
    ax.legend(loc="upper right", fontsize="x-small")


def _over_the_day(ax_tpot: Axes, ax_rate: Axes, replay: Replay) -> None:
    for name in (CONTROLLED, *replay.baselines):
        segments = replay.segments(name)
        middles = [(s.start + s.end) / 2 for s in segments]
        tpots = [sum(s.tpots) / len(s.tpots) * 1e3 if s.tpots else float("nan") for s in segments]
        width, alpha = (2.0, 1.0) if name == CONTROLLED else (1.0, 0.85)
        label = name if name == CONTROLLED else f"{name} ({_role(replay, name)})"
        rates = [s.throughput for s in segments]
        ax_tpot.plot(middles, tpots, marker=".", label=label, lw=width, alpha=alpha)
        ax_rate.plot(middles, rates, marker=".", label=label, lw=width, alpha=alpha)
    ax_tpot.set_ylabel("mean TPOT (ms)")
    ax_tpot.set_title(f"every policy, the same day in virtual time, truth {replay.truth}")
    ax_rate.set_ylabel("throughput (tokens/s, log scale)")
    ax_rate.set_yscale("log")
    ax_rate.set_xlabel("seconds into the day")
    ax_tpot.legend(loc="upper left", fontsize="x-small")


def plot(record: RunRecord, out_dir: Path) -> tuple[Path, ...]:
    """``load-and-k.png`` (load against the crossover, and k, over the day) and
    ``comparison.png`` (TPOT and throughput over the day per policy, virtual time)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    timeline = out_dir / "load-and-k.png"
    fig, (load_ax, k_ax) = plt.subplots(2, 1, sharex=True, figsize=(10, 7))
    load_ax.set_title(f"{record.service}: load against the measured crossover, and k")
    _load_axis(load_ax, record)
    _k_axis(k_ax, record)
    fig.tight_layout()
    fig.savefig(timeline, dpi=100)
    plt.close(fig)

    comparison = out_dir / "comparison.png"
    fig, (tpot_ax, rate_ax) = plt.subplots(2, 1, sharex=True, figsize=(10, 7))
    _over_the_day(tpot_ax, rate_ax, record.replay)
    fig.tight_layout()
    fig.savefig(comparison, dpi=100)
    plt.close(fig)
    return (timeline, comparison)
