"""The demo's closing report: what the controller decided and why, and what the run measured
next to the simulated baselines, as markdown and PNG plots."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from specops.bench import LoadTrace
from specops.demo._baselines import Baseline
from specops.demo._snapshot import DecisionView, Snapshot

__all__ = ["EventView", "Measured", "RunRecord", "decisions_of", "markdown", "plot"]


@dataclass(frozen=True)
class EventView:
    """A Kubernetes Event on the SpeculativeService."""

    time: str
    reason: str
    message: str


@dataclass(frozen=True)
class Measured:
    """The live run's figures from its engines' own metrics (Prometheus), over the whole day."""

    mean_tpot_s: float | None
    throughput: float | None
    completed: int
    failed: int


@dataclass(frozen=True)
class RunRecord:
    trace: LoadTrace
    snapshots: tuple[Snapshot, ...]
    events: tuple[EventView, ...]
    measured: Measured
    baselines: tuple[Baseline, ...]
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
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _k_changes(snapshots: Sequence[Snapshot]) -> list[tuple[float, str]]:
    changes: list[tuple[float, str]] = []
    for snapshot in snapshots:
        if not changes or changes[-1][1] != snapshot.deployment:
            changes.append((snapshot.elapsed_s, snapshot.deployment))
    return changes


def markdown(record: RunRecord, plots: Sequence[Path]) -> str:
    """The report: decisions, figures against the baselines, timings, plots."""
    trace = record.trace
    lines = [
        "# specops demo report",
        "",
        f"SpeculativeService `{record.service}`, {trace.duration_s / 60:g} minutes of"
        f" {trace.description or trace.name} on workload `{trace.workload}`.",
        "",
        "## What the controller decided",
        "",
    ]
    every = decisions_of(record.snapshots)
    runs = [run for run in _runs(every) if run[0].action != "Keep"]
    if runs:
        lines += [
            "| time | action | code | recommended | applied | gain % | in a row | reason |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for d, count in runs:
            gain = "-" if d.predicted_gain_percent is None else f"{d.predicted_gain_percent:+.1f}"
            lines.append(
                f"| {d.time} | {d.action} | {d.reason_code or '-'} | {d.recommended or '-'} |"
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
    measured = record.measured
    restarts = sum(1 for d in every if d.applied and d.action != "Keep")
    lines += [
        "## TPOT and throughput",
        "",
        "| run | mean TPOT ms | p90 TPOT ms | throughput tok/s | restarts |",
        "|---|---|---|---|---|",
        f"| specops, live (real processes, measured) | {_ms(measured.mean_tpot_s)} | - |"
        f" {_rate(measured.throughput)} | {restarts} |",
    ]
    for baseline in record.baselines:
        s = baseline.summary
        lines.append(
            f"| {baseline.name} (simulated) | {_ms(s.mean_tpot_s)} | {_ms(s.p90_tpot_s)} |"
            f" {_rate(s.throughput)} | {s.restarts} |"
        )
    truths = ", ".join(sorted({b.run.truth for b in record.baselines})) or "-"
    lines += [
        "",
        "The baselines are simulated: the same load trace replayed on the simulated engine in"
        f" virtual time, on the engine truth {truths} and the same workload (`specops bench`"
        " machinery; the controller is given a profile, not the truth), so they"
        " carry none of this machine's noise. The live row comes from the engines' own metrics"
        f" (scraped by Prometheus) while {measured.completed} requests completed"
        f" ({measured.failed} failed) on real local processes sharing this machine's CPUs.",
        "",
        "## Timings",
        "",
        "| step | seconds |",
        "|---|---|",
        *(f"| {name} | {seconds:.1f} |" for name, seconds in record.timings),
        "",
    ]
    if plots:
        lines += ["## Plots", "", *(f"![{p.stem}]({p.name})" for p in plots), ""]
    return "\n".join(lines)


def plot(record: RunRecord, out_dir: Path) -> tuple[Path, ...]:
    """``load-and-k.png`` (the run over time) and ``baselines.png`` (TPOT and throughput)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    timeline = out_dir / "load-and-k.png"
    snaps = record.snapshots
    times = [s.elapsed_s for s in snaps]
    fig, (load_ax, k_ax) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    load_ax.plot(times, [s.load.target for s in snaps], label="requests wanted (trace)")
    load_ax.plot(
        times,
        [float("nan") if s.concurrency is None else s.concurrency for s in snaps],
        label="running per pod (controller's window)",
    )
    load_ax.set_ylabel("requests")
    load_ax.set_title(f"{record.service}: load and speculative config")
    load_ax.legend(loc="upper right", fontsize="small")
    labels = sorted({s.deployment for s in snaps})
    k_ax.step(times, [labels.index(s.deployment) for s in snaps], where="post")
    k_ax.set_yticks(range(len(labels)), labels)
    for decision_at in _decision_times(snaps):
        k_ax.axvline(decision_at, color="grey", linestyle=":", linewidth=0.8)
    k_ax.set_ylabel("Deployment config")
    k_ax.set_xlabel("seconds into the day")
    fig.tight_layout()
    fig.savefig(timeline, dpi=100)
    plt.close(fig)

    bars = out_dir / "baselines.png"
    names = ["specops (live)", *(f"{b.name} (sim)" for b in record.baselines)]
    tpots = [record.measured.mean_tpot_s, *(b.summary.mean_tpot_s for b in record.baselines)]
    rates = [record.measured.throughput, *(b.summary.throughput for b in record.baselines)]
    fig, (tpot_ax, rate_ax) = plt.subplots(1, 2, figsize=(10, 4))
    tpot_ax.bar(names, [0.0 if t is None else t * 1e3 for t in tpots])
    tpot_ax.set_ylabel("mean TPOT (ms)")
    rate_ax.bar(names, [0.0 if r is None else r for r in rates])
    rate_ax.set_ylabel("throughput (tokens/s)")
    for ax in (tpot_ax, rate_ax):
        ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(bars, dpi=100)
    plt.close(fig)
    return (timeline, bars)


def _decision_times(snapshots: Sequence[Snapshot]) -> list[float]:
    """When each applied decision was first seen."""
    seen: set[str] = set()
    out = []
    for snapshot in snapshots:
        decision = snapshot.decision
        if decision is not None and decision.applied and decision.time not in seen:
            seen.add(decision.time)
            out.append(snapshot.elapsed_s)
    return out
