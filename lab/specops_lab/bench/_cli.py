"""``specops bench``: every policy over a suite of load traces, in virtual time."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import click

from specops_lab.bench._plots import plot_all
from specops_lab.bench._report import evaluate_targets, markdown, results_json
from specops_lab.bench._spec import BenchError, load_suite
from specops_lab.bench._suite import run_suite
from specops_lab.sim import default_jobs

__all__ = ["bench"]

_DATA = Path(__file__).resolve().parents[3] / "bench"
# The CI suite (bench/short.yaml) across its truths must finish in this long on the lab's
# two-core machine.
_SHORT_WALL_TARGET_S = 300.0


@click.command("bench")
@click.option("--full", is_flag=True, help="Run the full suite (bench/full.yaml), not the CI one.")
@click.option(
    "--suite",
    "suite_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A suite YAML file (default: bench/short.yaml, or bench/full.yaml with --full).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-results"),
    show_default=True,
    help="Where results.json, results.md and the plots go.",
)
@click.option(
    "--truth",
    "truths",
    multiple=True,
    help="Run on this engine truth, a shipped name or a truth file, instead of the suite's "
    "(repeatable: each is an axis value, its results named by the truth's own name).",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=default_jobs(),
    show_default=True,
    help="Processes for the independent runs (every policy on every trace and truth).",
)
@click.option("--quiet", is_flag=True, help="Print only the tables, not the progress.")
def bench(
    full: bool,
    suite_path: Path | None,
    out: Path,
    truths: tuple[str, ...],
    jobs: int,
    quiet: bool,
) -> None:
    """Compare speculation policies on the simulated engine: tables, targets, plots."""
    path = suite_path or _DATA / ("full.yaml" if full else "short.yaml")
    command = "specops " + shlex.join(sys.argv[1:]) if sys.argv[1:] else "specops bench"
    started = time.monotonic()

    def progress(message: str) -> None:
        if not quiet:
            click.echo(f"[{time.monotonic() - started:6.1f}s] {message}", err=True)

    try:
        suite, traces = load_suite(path)
        if truths:
            suite = suite.model_copy(update={"truths": truths})
        results = run_suite(suite, traces, progress, jobs)
    except BenchError as exc:
        raise click.ClickException(str(exc)) from exc
    wall_s = time.monotonic() - started
    targets = evaluate_targets(results, suite.controller.window_s, suite.service.restart_downtime_s)
    out.mkdir(parents=True, exist_ok=True)
    timing = f"Wall time: {wall_s:.1f} s with {jobs} process{'es' if jobs > 1 else ''}"
    run: dict[str, object] = {"wall_s": wall_s, "jobs": jobs}
    if suite_path is None and not full:
        met = wall_s < _SHORT_WALL_TARGET_S
        timing += f" (target for the short suite: under {_SHORT_WALL_TARGET_S:.0f} s: "
        timing += "met)" if met else "NOT met)"
        run |= {"wall_target_s": _SHORT_WALL_TARGET_S, "wall_target_met": met}
    report = markdown(results, targets, command, suite.controller.window_s) + f"\n{timing}.\n"
    (out / "results.md").write_text(report, encoding="utf-8")
    payload = {**results_json(results, targets, command), **run}
    (out / "results.json").write_text(json.dumps(payload, indent=2), encoding="utf-8")
    plots = plot_all(results, out)
    click.echo(report)
    click.echo(f"wrote {out / 'results.json'}, {out / 'results.md'} and {len(plots)} plots")
