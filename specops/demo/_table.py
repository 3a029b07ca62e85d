"""The live view: one rich table of what the controller sees and decides, and a plain line
of the same for logs that are not a terminal."""

from __future__ import annotations

from collections import Counter

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from specops.demo._snapshot import Snapshot

__all__ = ["render_table", "summary_line"]


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


def _engines(engines: tuple[str, ...]) -> str:
    if not engines:
        return "none"
    return ", ".join(f"{count}x {config}" for config, count in sorted(Counter(engines).items()))


def render_table(snapshot: Snapshot) -> RenderableType:
    """Progress through the day, then the controller's view and its last decision."""
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
        f"{load.target} wanted, {load.in_flight} in flight, "
        f"{load.completed} done, {load.failed} failed",
    )
    table.add_row(
        "measured",
        f"concurrency {_number(snapshot.concurrency)} per pod, acceptance length "
        f"{_number(snapshot.acceptance_length, 2)}, TPOT {_number(snapshot.tpot_ms)} ms",
    )
    table.add_row("k in force", snapshot.in_force)
    table.add_row("Deployment", snapshot.deployment)
    decision = snapshot.decision
    if decision is None:
        table.add_row("recommended", "-")
        table.add_row("last decision", "none yet (the first needs a full measurement window)")
    else:
        gain = decision.predicted_gain_percent
        table.add_row("recommended", decision.recommended or "-")
        table.add_row(
            "last decision",
            f"{decision.action} ({decision.reason_code or 'no code'}) at {decision.time}"
            + ("" if gain is None else f", predicted gain {gain:+.1f} %"),
        )
        table.add_row("reason", decision.reason)
    table.add_row(
        "pods", f"{snapshot.ready}/{snapshot.desired} ready; engines: {_engines(snapshot.engines)}"
    )
    return Group(heading, ProgressBar(total=1.0, completed=share, width=60), table)


def summary_line(snapshot: Snapshot) -> str:
    """The same view in one line, for output that is not a terminal."""
    decision = snapshot.decision
    last = "-" if decision is None else f"{decision.action}/{decision.reason_code or '-'}"
    return (
        f"[{_clock(snapshot.elapsed_s)}] {snapshot.phase}: load {snapshot.load.target} "
        f"(in flight {snapshot.load.in_flight}), concurrency {_number(snapshot.concurrency)}, "
        f"acceptance {_number(snapshot.acceptance_length, 2)}, k {snapshot.in_force}, "
        f"recommended {decision.recommended if decision and decision.recommended else '-'}, "
        f"last {last}, pods {snapshot.ready}/{snapshot.desired}"
    )
