"""``specops podrunner``: run the local cluster's specops pods as simulated engines."""

from __future__ import annotations

import asyncio
import logging
import signal
import tempfile
from pathlib import Path

import click

from specops.errors import SpecopsError
from specops_lab.sim import DEFAULT_TRUTH

__all__ = ["podrunner"]


@click.command("podrunner")
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The cluster to watch (default: $KUBECONFIG, then ~/.kube/config).",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Logs, state.json, Prometheus config and data [default: a new temporary directory].",
)
@click.option(
    "--truth",
    default=DEFAULT_TRUTH,
    show_default=True,
    help="The simulated engines' physics: a shipped truth's name or a truth file.",
)
@click.option("--workload", default="sharegpt", show_default=True, help="Sim workload.")
@click.option(
    "--startup-delay",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0.0),
    help="Seconds each engine takes to 'load the model'.",
)
@click.option("--poll-interval", default=1.0, show_default=True, type=click.FloatRange(0.1))
@click.option(
    "--prometheus",
    "prometheus_binary",
    default=None,
    is_flag=False,
    flag_value="/usr/bin/prometheus",
    help="Start Prometheus (this binary; bare flag: /usr/bin/prometheus) to scrape the pods.",
)
@click.option("--scrape-interval", default=2.0, show_default=True, type=click.FloatRange(0.1))
@click.option("--proxies/--no-proxies", default=True, show_default=True, help="Per-service proxy.")
@click.option("--log-level", default="INFO", show_default=True)
def podrunner(
    kubeconfig: Path | None,
    work_dir: Path | None,
    truth: str,
    workload: str,
    startup_delay: float,
    poll_interval: float,
    prometheus_binary: str | None,
    scrape_interval: float,
    proxies: bool,
    log_level: str,
) -> None:
    """Run each scheduled specops pod on the fake nodes as `specops sim serve` plus its sidecar,
    with the pod's own arguments; stop them when the pod goes. Ctrl-C stops everything.

    Per-pod overrides: annotations specops.io/sim-truth, sim-workload, sim-startup-delay.
    Where everything listens: WORK_DIR/state.json.
    """
    from specops_lab.podrunner._kube import KubePodSource
    from specops_lab.podrunner._runner import PodRunner, RunnerOptions
    from specops_lab.podrunner._translate import SimOptions

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    directory = (work_dir or Path(tempfile.mkdtemp(prefix="specops-podrunner-"))).resolve()
    options = RunnerOptions(
        work_dir=directory,
        sim=SimOptions(truth=truth, workload=workload, startup_delay_s=startup_delay),
        poll_interval_s=poll_interval,
        prometheus_binary=prometheus_binary,
        scrape_interval_s=scrape_interval,
        proxies=proxies,
    )
    click.echo(f"pod runner: state in {options.state_file}", err=True)

    async def main(source: KubePodSource) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await PodRunner(source, options).run(stop)

    try:
        source = KubePodSource(kubeconfig)
        try:
            asyncio.run(main(source))
        finally:
            source.close()
    except SpecopsError as exc:
        raise click.ClickException(str(exc)) from exc
