"""The live view: one rich table of the load (wanted, in the client, in the engines) against
the crossover the controller measured, the k in force, and each decision with its reason as
it comes; and the same as plain lines for output that is not a terminal (a line per
refresh, and a line per new decision)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from specops_lab.demo._snapshot import CrossoverView, DecisionView, Snapshot, short_time

__all__ = ["crossover_words", "decision_line", "load_gauge", "render_table", "summary_line"]

_SHOWN_DECISIONS = 6
_GAUGE_WIDTH = 40
_REASON_CHARS = 110


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


def _engines(engines: tuple[str, ...]) -> str:
    if not engines:
        return "none"
    return ", ".join(f"{count}x {config}" for config, count in sorted(Counter(engines).items()))


def _k_of(config: str) -> int | None:
    """k of ``k=5`` or the cap of ``k<=5 [...]``; 0 for ``off``; None when unknown."""
    if config == "off":
        return 0
    digits = config.removeprefix("k<=").removeprefix("k=").split(" ", 1)[0]
    return int(digits) if digits.isdigit() else None


def _band(crossover: CrossoverView) -> str:
    if crossover.batch is None:
        return f"k={crossover.k} pays at every batch size"
    low = "-" if crossover.low is None else str(crossover.low)
    high = "beyond the cap" if crossover.high is None else str(crossover.high)
    return f"k={crossover.k} at batch {crossover.batch} (10-90 %: {low}-{high})"


def crossover_words(snapshot: Snapshot) -> str:
    """Where the k in force stops paying and above which batch no k pays, as measured."""
    decision = snapshot.decision
    if decision is None or not decision.crossovers:
        return "not measured yet"
    parts = []
    k = _k_of(snapshot.in_force)
    mine = decision.crossover(k) if k else None
    if mine is not None:
        parts.append(f"in force: {_band(mine)}")
    last = decision.last_crossover
    if last is not None:
        parts.append(f"no k pays above batch {last.batch} ({_band(last)})")
    elif not parts:
        parts.append("some k pays at every batch size")
    source = decision.step_time or "?"
    intervals = f", {decision.step_time_intervals} intervals" if decision.step_time else ""
    return "; ".join(parts) + f"; step time {source}{intervals}"


def load_gauge(
    load: float | None, crossover: CrossoverView | None, width: int = _GAUGE_WIDTH
) -> str:
    """A text gauge of ``load`` (running requests per pod) against a crossover band:
    ``=`` the load, ``:`` the 10-90 % band, ``|`` the crossover."""
    if load is None:
        return ""
    marks = [load]
    if crossover is not None and crossover.batch is not None:
        marks += [crossover.batch, crossover.high or crossover.batch]
    scale = max(marks) * 1.15 or 1.0

    def at(value: float) -> int:
        return min(width - 1, max(0, round(value / scale * (width - 1))))

    cells = ["=" if i <= at(load) else " " for i in range(width)]
    if crossover is not None and crossover.batch is not None:
        for i in range(at(crossover.low or 0), at(crossover.high or crossover.batch) + 1):
            cells[i] = ":" if cells[i] == " " else cells[i]
        cells[at(crossover.batch)] = "|"
    side = (
        ""
        if crossover is None or crossover.batch is None
        else (" above" if load > crossover.batch else " below")
    )
    return f"[{''.join(cells)}] {load:.0f}{side}"


def _short(text: str, limit: int = _REASON_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def decision_line(decision: DecisionView) -> str:
    """One decision in a line: when, what, its code, what it chose, why."""
    gain = decision.predicted_gain_percent
    chose = f" -> {decision.recommended}" if decision.recommended else ""
    return (
        f"{short_time(decision.time)} {decision.action}"
        f" ({decision.reason_code or 'no code'}){chose}"
        + ("" if gain is None else f", gain {gain:+.1f} %")
        + f": {_short(decision.reason)}"
    )


def render_table(snapshot: Snapshot, decisions: Sequence[DecisionView] = ()) -> RenderableType:
    """Progress through the day, the load against the crossover, the k in force, and the
    latest decisions, newest last."""
    share = min(snapshot.elapsed_s / snapshot.duration_s, 1.0) if snapshot.duration_s else 1.0
    heading = Text.assemble(
        (f"{_clock(snapshot.elapsed_s)} / {_clock(snapshot.duration_s)}", "bold"),
        f"  {snapshot.phase}  ",
    )
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="cyan", no_wrap=True)
    table.add_column()
    load = snapshot.load
    table.add_row(
        "load",
        f"{load.target} wanted, {load.in_flight} in flight in the client, "
        f"{_number(snapshot.engine_in_flight, 0)} in the engines (running + waiting); "
        f"{load.completed} done, {load.failed} failed",
    )
    decision = snapshot.decision
    last = decision.last_crossover if decision else None
    table.add_row("vs crossover", load_gauge(snapshot.concurrency, last))
    table.add_row("crossover", crossover_words(snapshot))
    table.add_row(
        "measured",
        f"{_number(snapshot.concurrency)} running per pod, acceptance length "
        f"{_number(snapshot.acceptance_length, 2)}, TPOT {_number(snapshot.tpot_ms)} ms",
    )
    table.add_row("k in force", f"{snapshot.in_force} (Deployment: {snapshot.deployment})")
    table.add_row(
        "pods", f"{snapshot.ready}/{snapshot.desired} ready; engines: {_engines(snapshot.engines)}"
    )
    shown = list(decisions)[-_SHOWN_DECISIONS:]
    if not shown and decision is not None:
        shown = [decision]
    if shown:
        for index, each in enumerate(shown):
            table.add_row("decisions" if index == 0 else "", decision_line(each))
    else:
        table.add_row("decisions", "none yet (the first needs a full measurement window)")
    return Group(heading, ProgressBar(total=1.0, completed=share, width=60), table)


def summary_line(snapshot: Snapshot) -> str:
    """The same view in one line, for output that is not a terminal."""
    decision = snapshot.decision
    last = "-" if decision is None else f"{decision.action}/{decision.reason_code or '-'}"
    crossover = decision.last_crossover if decision else None
    above = "-" if crossover is None or crossover.batch is None else str(crossover.batch)
    return (
        f"[{_clock(snapshot.elapsed_s)}] {snapshot.phase}: wanted {snapshot.load.target}, "
        f"client {snapshot.load.in_flight}, engines {_number(snapshot.engine_in_flight, 0)} "
        f"in flight; running {_number(snapshot.concurrency)} per pod, no k pays above "
        f"{above}; acceptance {_number(snapshot.acceptance_length, 2)}, k {snapshot.in_force}, "
        f"recommended {decision.recommended if decision and decision.recommended else '-'}, "
        f"last {last}, pods {snapshot.ready}/{snapshot.desired}"
    )
