"""``specops demo``: the whole loop on this machine, with a live view and a report."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Literal

import click

from specops.errors import SpecopsError
from specops_lab.demo._plan import DemoOptions

__all__ = ["demo"]

_DEFAULTS = DemoOptions()


@click.command("demo")
@click.option(
    "--minutes",
    default=_DEFAULTS.minutes,
    show_default=True,
    type=click.FloatRange(min=1.0),
    help="Length of the compressed day of load.",
)
@click.option(
    "--out",
    "out_dir",
    default=_DEFAULTS.out_dir,
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where report.md, the PNG plots and the logs go.",
)
@click.option(
    "--use-current-context",
    is_flag=True,
    help="Use the cluster of the current kubeconfig (KUBECONFIG, else ~/.kube/config)"
    " instead of starting a local control plane; it needs fake GPU nodes (kwok) for the"
    " pod runner to run the pods.",
)
@click.option(
    "--trace",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A load trace in the format of bench/traces/*.yaml [default: the built-in day].",
)
@click.option("--namespace", default=_DEFAULTS.namespace, show_default=True)
@click.option(
    "--profile", default=_DEFAULTS.profile, show_default=True, help="The controller's profile."
)
@click.option(
    "--truth",
    default=_DEFAULTS.truth,
    show_default=True,
    help="The simulated engines' physics (a truth's name or file), which --profile need not match.",
)
@click.option("--workload", default=_DEFAULTS.workload, show_default=True, help="Sim workload.")
@click.option(
    "--startup-delay",
    default=_DEFAULTS.startup_delay_s,
    show_default=True,
    type=click.FloatRange(min=0.0),
    help="Seconds each simulated engine takes to 'load the model' after a restart.",
)
@click.option(
    "--window",
    default=_DEFAULTS.window_s,
    show_default=True,
    type=click.IntRange(min=30),
    help="The controller's measurement window, seconds.",
)
@click.option(
    "--dwell",
    default=_DEFAULTS.dwell_s,
    show_default=True,
    type=click.IntRange(min=30),
    help="Least seconds between two reconfigurations (at least --window).",
)
@click.option(
    "--metrics-source",
    type=click.Choice(["Direct", "Prometheus"]),
    default=_DEFAULTS.metrics_source,
    show_default=True,
    help="Where the controller reads the pods' metrics: each pod's sidecar, or Prometheus.",
)
@click.option(
    "--refresh",
    default=_DEFAULTS.refresh_s,
    show_default=True,
    type=click.FloatRange(min=0.5),
    help="Seconds between refreshes of the live table.",
)
def demo(
    minutes: float,
    out_dir: Path,
    use_current_context: bool,
    trace: Path | None,
    namespace: str,
    profile: str,
    truth: str,
    workload: str,
    startup_delay: float,
    window: int,
    dwell: int,
    metrics_source: Literal["Direct", "Prometheus"],
    refresh: float,
) -> None:
    """Run the whole specops loop here and write a report.

    Brings up a local Kubernetes control plane (built from source on the first run, about
    7 minutes; cached afterwards), installs the chart, runs the operator with the chart's
    RBAC identity and simulated vLLM pods, applies an example SpeculativeService, drives a
    compressed day of load while showing the load against the crossover the controller
    measures and each decision as it comes, then writes report.md with PNG plots: the
    same day replayed in virtual time for every policy (specops, no speculation, each
    static k, vLLM's documented table, the oracle) on one engine truth, and the live run
    as a check: its decisions, the load its engines held and how fast they stepped
    against the truth. Every process it starts is stopped on exit, on Ctrl-C and on
    failure.
    """
    from rich.console import Console

    from specops_lab.demo._run import run_demo

    if dwell < window:
        raise click.BadParameter(f"must be at least --window ({window})", param_hint="--dwell")
    options = DemoOptions(
        minutes=minutes,
        out_dir=out_dir,
        use_current_context=use_current_context,
        trace=trace,
        namespace=namespace,
        profile=profile,
        truth=truth,
        workload=workload,
        startup_delay_s=startup_delay,
        window_s=window,
        dwell_s=dwell,
        refresh_s=refresh,
        metrics_source=metrics_source,
    )
    console = Console(soft_wrap=not sys.stdout.isatty())
    # Ctrl-C, and a SIGTERM from a supervisor, unwind the demo so it stops what it started
    # (SIGINT too when started in the background, where the shell ignores it).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        report = run_demo(options, console)
    except SpecopsError as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:
        console.print("interrupted; everything the demo started has been stopped")
        raise SystemExit(130) from None
    click.echo(report.read_text())
    click.echo(f"report: {report}")
