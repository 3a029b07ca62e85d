"""``specops demo`` end to end: announce the plan, bring the stack up step by step, drive the
day while showing what the controller sees and decides, read back what the engines held
and how fast they stepped, replay the day in virtual time for every policy, write the
report.

Every process and object the demo starts is registered on one exit stack right after it
starts, so a failure, Ctrl-C or the normal end stops them all, newest first.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.live import Live

from specops_lab.bench import LoadTrace
from specops_lab.cluster import (
    CacheLayout,
    ClusterOptions,
    LocalCluster,
    Versions,
    running_cluster,
)
from specops_lab.demo._cluster import (
    ClusterView,
    engine_in_flight,
    engine_intervals,
    engine_request_time,
    in_flight_series,
)
from specops_lab.demo._errors import DemoError
from specops_lab.demo._fidelity import check_steps
from specops_lab.demo._live import LiveFigures, held_by_phase, phase_of
from specops_lab.demo._load import ConcurrencyDriver
from specops_lab.demo._plan import DemoOptions, Step, demo_service, plan_steps
from specops_lab.demo._replay import replay_day
from specops_lab.demo._report import (
    EventView,
    RunRecord,
    decisions_of,
    markdown,
    plot,
    summary_json,
)
from specops_lab.demo._snapshot import DecisionView, Snapshot, take_snapshot
from specops_lab.demo._table import decision_line, render_table, summary_line
from specops_lab.demo._trace import concurrency_at, load_demo_trace, segment_at
from specops_lab.launch import (
    ALLOW_LOCAL_PROMETHEUS,
    OperatorProcess,
    PodRunnerProcess,
    installed_chart,
    operator_kubeconfig,
)
from specops_lab.sim import load_truth

__all__ = ["EXAMPLE", "run_demo"]

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llama.yaml"
_READY_TIMEOUT_S = 180.0
_CLUSTER_PREFIX = "demo-"
# Seconds per interval of the engines' figures read back from Prometheus (five scrapes).
_INTERVAL_S = 10.0
# The pod runner's Prometheus scrapes every 2 s.
_SCRAPE_S = 2.0


class _Steps:
    """Announces each step as it starts and keeps how long it took."""

    def __init__(self, steps: tuple[Step, ...], console: Console) -> None:
        self._steps = {s.key: (i + 1, s) for i, s in enumerate(steps)}
        self._total = len(steps)
        self._console = console
        self.timings: list[tuple[str, float]] = []

    @contextmanager
    def __call__(self, key: str) -> Iterator[None]:
        number, step = self._steps[key]
        self._console.rule(f"[bold][{number}/{self._total}] {step.title}")
        self._console.print(step.detail, style="dim")
        started = time.monotonic()
        yield
        took = time.monotonic() - started
        self.timings.append((step.title, took))
        self._console.print(f"done in {took:.1f} s", style="green")


def _prune_abandoned(layout: CacheLayout) -> None:
    """Remove the run directories of demos that were killed outright (their processes died
    with them, being tied to them)."""
    for run_dir in (layout.root / "run").glob(f"{_CLUSTER_PREFIX}*"):
        owner = run_dir.name.removeprefix(_CLUSTER_PREFIX)
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            LocalCluster(ClusterOptions(name=run_dir.name), layout=layout).down()


def _kubeconfig_of_current_context() -> Path:
    path = Path(os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config")
    path = path.expanduser()
    if not path.is_file():
        raise DemoError(f"--use-current-context: no kubeconfig at {path} (set KUBECONFIG)")
    return path


def _cached(layout: CacheLayout, versions: Versions) -> bool:
    return all(
        (folder / "build.json").is_file()
        for folder in (layout.kubernetes(versions.kubernetes), layout.kwok(versions.kwok))
    )


def _wait(done: Any, what: str, log: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            raise DemoError(
                f"timed out after {_READY_TIMEOUT_S:.0f} s waiting for {what} (see {log})"
            )
        time.sleep(0.5)


def _observe(
    view: ClusterView, runner: PodRunnerProcess, trace: LoadTrace, driver: ConcurrencyDriver
) -> Snapshot:
    elapsed = driver.elapsed()
    index = segment_at(trace, elapsed)
    state = runner.state()
    pods = state.service_pods(view.namespace, view.name)
    draining = [
        p for p in state.stopping if (p.namespace, p.service) == (view.namespace, view.name)
    ]
    return take_snapshot(
        elapsed_s=elapsed,
        duration_s=trace.duration_s,
        phase=trace.segments[index].name(index),
        load=driver.counts(),
        engine_in_flight=engine_in_flight([p.engine_url for p in [*pods, *draining]]),
        service=view.service(),
        deployment=view.deployment(),
        engines=[p.speculative_config for p in pods if p.ready],
    )


def _show(
    snapshots: list[Snapshot],
    seen: list[DecisionView],
    live: Live | None,
    console: Console,
) -> None:
    """The live table on a terminal; otherwise a line per refresh and one per new decision."""
    decisions = decisions_of(snapshots)
    fresh = decisions[len(seen) :]
    seen.extend(fresh)
    if live is not None:
        live.update(render_table(snapshots[-1], decisions))
        return
    console.print(summary_line(snapshots[-1]), highlight=False)
    for decision in fresh:
        console.print(f"  decision {decision_line(decision)}", highlight=False)


async def _drive(
    view: ClusterView,
    runner: PodRunnerProcess,
    trace: LoadTrace,
    url: str,
    model: str,
    options: DemoOptions,
    console: Console,
) -> tuple[list[Snapshot], ConcurrencyDriver]:
    driver = ConcurrencyDriver(url, model, lambda t: concurrency_at(trace, t))
    load = asyncio.create_task(driver.run(trace.duration_s))
    snapshots: list[Snapshot] = []
    seen: list[DecisionView] = []
    live = Live(console=console, refresh_per_second=2) if console.is_terminal else None
    try:
        with live or nullcontext():
            while not load.done():
                snapshot = await asyncio.to_thread(_observe, view, runner, trace, driver)
                snapshots.append(snapshot)
                _show(snapshots, seen, live, console)
                await asyncio.wait([load], timeout=options.refresh_s)
        await load
    finally:
        load.cancel()
    return snapshots, driver


def run_demo(options: DemoOptions, console: Console) -> Path:
    """Run the whole demo; returns the report's path."""
    trace = load_demo_trace(options.trace, options.minutes)
    example: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    speculation = example["spec"]["speculation"]["numSpeculativeTokens"]
    layout, versions = CacheLayout.from_env(), Versions()
    steps = _Steps(
        plan_steps(
            options,
            trace,
            cached=_cached(layout, versions),
            cache_dir=layout.root,
            initial_k=int(speculation["initial"]),
        ),
        console,
    )
    out = options.out_dir
    out.mkdir(parents=True, exist_ok=True)
    console.print(f"specops demo: the whole loop on this machine; output in {out}/")
    with ExitStack() as stack:
        with steps("cluster"):
            kubeconfig = _cluster(options, layout, stack, console)
        with steps("chart"):
            release = stack.enter_context(
                installed_chart(
                    kubeconfig, values={"operator": {"clusterWide": True}}, operator_replicas=0
                )
            )
        with steps("operator"):
            identity = operator_kubeconfig(kubeconfig, release, out / "operator.kubeconfig")
            operator = OperatorProcess(
                identity, out / "logs" / "operator.log", extra_args=ALLOW_LOCAL_PROMETHEUS
            )
            stack.callback(operator.stop)
            operator.start()
        with steps("podrunner"):
            runner, prometheus = _pod_runner(kubeconfig, options, stack)
        with steps("service"):
            service = demo_service(example, options, prometheus)
            (out / "service.yaml").write_text(yaml.safe_dump(service, sort_keys=False))
            view = _applied(service, kubeconfig, runner, options, stack)
        with steps("load"):
            snapshots, events, live = _load(
                view, runner, prometheus, trace, service, options, console
            )
    console.print("stopped the operator, the pod runner, Prometheus and the cluster")
    with steps("replay"):
        replay = replay_day(
            trace,
            options,
            initial_k=int(speculation["initial"]),
            k_max=int(speculation["max"]),
            max_num_seqs=int(example["spec"]["engine"]["maxNumSeqs"]),
            per_batch_size=bool(service["spec"]["speculation"]["perBatchSizeSchedule"]),
            progress=lambda m: console.print(f"replaying {m}", style="dim"),
        )
    with steps("report"):
        record = RunRecord(
            trace=trace,
            snapshots=tuple(snapshots),
            events=events,
            live=live,
            replay=replay,
            timings=tuple(steps.timings),
            service=f"{options.namespace}/{view.name}",
        )
        report = _write_report(record, out)
    return report


def _cluster(options: DemoOptions, layout: CacheLayout, stack: ExitStack, console: Console) -> Path:
    """The kubeconfig of the cluster the demo runs on: the current context's, or that of a
    local cluster of its own, stopped with ``stack``."""
    if options.use_current_context:
        return _kubeconfig_of_current_context()
    _prune_abandoned(layout)
    cluster = running_cluster(
        ClusterOptions(name=f"{_CLUSTER_PREFIX}{os.getpid()}"),
        layout=layout,
        progress=lambda m: console.print(m, style="dim", highlight=False),
    )
    return stack.enter_context(cluster).kubeconfig


def _pod_runner(
    kubeconfig: Path, options: DemoOptions, stack: ExitStack
) -> tuple[PodRunnerProcess, str]:
    """The pod runner, stopped with ``stack``, and its Prometheus's URL."""
    runner = PodRunnerProcess(
        kubeconfig,
        options.out_dir / "podrunner",
        truth=options.truth,
        workload=options.workload,
        startup_delay_s=options.startup_delay_s,
    )
    stack.callback(runner.stop)
    return runner, runner.start()


def _applied(
    service: dict[str, Any],
    kubeconfig: Path,
    runner: PodRunnerProcess,
    options: DemoOptions,
    stack: ExitStack,
) -> ClusterView:
    """Apply ``service`` (removed with ``stack`` on a cluster the demo does not own) and wait
    until its pods run and answer."""
    name = service["metadata"]["name"]
    view = ClusterView(kubeconfig, options.namespace, name)
    stack.callback(view.close)
    stack.enter_context(view.applied(service, clean_up=options.use_current_context))

    def serving() -> bool:
        state = runner.state()
        pods = state.service_pods(options.namespace, name)
        return (
            bool(pods)
            and all(p.ready for p in pods)
            and bool(state.service_url(options.namespace, name))
        )

    _wait(serving, f"the pods of {name} to run and answer", runner.process.log)
    return view


def _load(
    view: ClusterView,
    runner: PodRunnerProcess,
    prometheus: str,
    trace: LoadTrace,
    service: dict[str, Any],
    options: DemoOptions,
    console: Console,
) -> tuple[list[Snapshot], tuple[EventView, ...], LiveFigures]:
    """Drive the day at the service; what the controller showed, its events, and what the
    engines held and how fast they stepped, from their own metrics in Prometheus."""
    url = runner.state().service_url(options.namespace, view.name)
    assert url is not None
    model = str(service["spec"].get("servedModelName") or service["spec"]["model"])
    started = time.time()
    snapshots, driver = asyncio.run(_drive(view, runner, trace, url, model, options, console))
    ended = time.time()
    events = view.events()
    time.sleep(2 * _SCRAPE_S)  # the last scrapes of the day reach Prometheus
    live = _live_figures(prometheus, options, trace, driver, started, ended)
    if driver.last_error:
        console.print(f"last failed request: {driver.last_error}", style="yellow")
    return snapshots, events, live


def _live_figures(
    prometheus: str,
    options: DemoOptions,
    trace: LoadTrace,
    driver: ConcurrencyDriver,
    started: float,
    ended: float,
) -> LiveFigures:
    """What the engines held, by phase, and the fidelity check of their steps."""
    namespace = options.namespace
    series = in_flight_series(prometheus, namespace, started, ended, _INTERVAL_S)
    held, day = held_by_phase(trace, driver.held, series)
    intervals = engine_intervals(prometheus, namespace, started, ended, _INTERVAL_S)
    fidelity = check_steps(intervals, load_truth(options.truth), phase_of(trace), _INTERVAL_S)
    return LiveFigures(
        completed=driver.completed,
        failed=driver.failed,
        held=held,
        day=day,
        engine_by_request_time=engine_request_time(prometheus, namespace, started, ended),
        fidelity=fidelity,
        in_flight=tuple(series),
    )


def _write_report(record: RunRecord, out: Path) -> Path:
    plots = plot(record, out)
    report = out / "report.md"
    report.write_text(markdown(record, plots))
    (out / "snapshots.json").write_text(
        json.dumps([asdict(s) for s in record.snapshots], indent=1) + "\n"
    )
    (out / "summary.json").write_text(json.dumps(summary_json(record), indent=1) + "\n")
    return report
