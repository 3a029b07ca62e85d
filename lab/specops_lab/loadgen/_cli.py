"""``specops load``: closed or open loop against an OpenAI-compatible URL, JSON out."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from specops_lab.loadgen._client import EngineLoad, LoadTarget
    from specops_lab.loadgen._stats import RequestRecord

__all__ = ["load"]


def _rate_trace(path: str) -> list[tuple[float, float]]:
    """A rate trace file: JSON list of [start_s, rate] pairs."""
    try:
        points = json.loads(Path(path).read_text(encoding="utf-8"))
        return [(float(start), float(rate)) for start, rate in points]
    except (OSError, ValueError, TypeError) as exc:
        raise click.BadParameter(
            f"{path}: expected a JSON list of [start_s, rate] ({exc})"
        ) from exc


@click.command()
@click.option("--url", default="http://127.0.0.1:8000", show_default=True)
@click.option("--model", required=True, help="Model name the server serves.")
@click.option("--concurrency", type=int, help="Closed loop: requests in flight.")
@click.option("--rate", type=float, help="Open loop: Poisson arrivals per second.")
@click.option(
    "--rate-trace", type=click.Path(exists=True), help="Open loop: [[start_s, rate], ...]."
)
@click.option("--duration", type=float, help="Seconds (open loop: of arrivals).")
@click.option("--num-requests", type=int, help="Closed loop: stop after this many.")
@click.option("--max-tokens", default=128, show_default=True, type=int)
@click.option("--prompt", default="Explain speculative decoding.", show_default=True)
@click.option("--chat", is_flag=True, help="Use /v1/chat/completions.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--output", type=click.Path(), help="Also write the JSON summary here.")
def load(
    url: str,
    model: str,
    concurrency: int | None,
    rate: float | None,
    rate_trace: str | None,
    duration: float | None,
    num_requests: int | None,
    max_tokens: int,
    prompt: str,
    chat: bool,
    seed: int,
    output: str | None,
) -> None:
    """Generate load and report TTFT, TPOT, ITL percentiles and throughput as JSON."""
    from rich.progress import Progress

    from specops_lab.loadgen._arrivals import poisson_arrivals, trace_arrivals
    from specops_lab.loadgen._client import LoadTarget
    from specops_lab.loadgen._stats import summarize

    modes = [concurrency is not None, rate is not None, rate_trace is not None]
    if sum(modes) != 1:
        raise click.UsageError("give exactly one of --concurrency, --rate, --rate-trace")
    target = LoadTarget(url=url, model=model, prompt=prompt, max_tokens=max_tokens, chat=chat)
    arrivals: list[float] = []
    if concurrency is None:
        if duration is None:
            raise click.UsageError("open loop needs --duration")
        if rate is not None:
            arrivals = poisson_arrivals(rate, duration, seed=seed)
        else:
            arrivals = trace_arrivals(_rate_trace(str(rate_trace)), duration, seed=seed)
    elif num_requests is None and duration is None:
        raise click.UsageError("closed loop needs --num-requests or --duration")
    total = len(arrivals) if concurrency is None else num_requests
    with Progress(disable=not sys.stderr.isatty(), transient=True) as bar:
        task = bar.add_task("requests", total=total)

        def advance(_: RequestRecord) -> None:
            bar.advance(task)

        started = time.perf_counter()
        records, engine = asyncio.run(
            _drive(target, concurrency, arrivals, num_requests, duration, advance)
        )
        elapsed = time.perf_counter() - started
    summary = summarize(records, elapsed)
    held = _held(concurrency, summary, engine)
    summary["concurrency"] = held
    text = json.dumps(summary, indent=2)
    if output:
        Path(output).write_text(text + "\n", encoding="utf-8")
    click.echo(text)
    click.echo(_held_line(held), err=True)


async def _drive(
    target: LoadTarget,
    concurrency: int | None,
    arrivals: list[float],
    num_requests: int | None,
    duration: float | None,
    progress: Callable[[RequestRecord], None],
) -> tuple[list[RequestRecord], EngineLoad | None]:
    """The load, with the engine's /metrics watched meanwhile."""
    from specops_lab.loadgen._client import (
        open_session,
        run_closed_loop,
        run_open_loop,
        watch_engine,
    )

    stop = asyncio.Event()
    async with open_session(2) as session:
        watcher = asyncio.create_task(watch_engine(session, target.url, stop))
        try:
            if concurrency is not None:
                records = await run_closed_loop(
                    target,
                    concurrency,
                    num_requests=num_requests,
                    duration_s=duration,
                    progress=progress,
                )
            else:
                records = await run_open_loop(target, arrivals, progress=progress)
        finally:
            stop.set()
        return records, await watcher


def _held(
    concurrency: int | None, summary: dict[str, object], engine: EngineLoad | None
) -> dict[str, float | None]:
    """Requests wanted in flight, what the client had, and what the engine held by its own
    gauges (running + waiting) and by its requests' time over wall time."""
    client = summary["client_in_flight"]
    return {
        "wanted": None if concurrency is None else float(concurrency),
        "client": float(client) if isinstance(client, int | float) else None,
        "engine": None if engine is None else engine.mean_in_flight,
        "engine_by_request_time": None if engine is None else engine.request_time_concurrency,
    }


def _held_line(held: dict[str, float | None]) -> str:
    def number(key: str) -> str:
        value = held[key]
        return "-" if value is None else f"{value:.1f}"

    engine = (
        "the engine's metrics were not found"
        if held["engine"] is None
        else f"the engine held {number('engine')} (running + waiting), "
        f"{number('engine_by_request_time')} by its requests' time"
    )
    return f"in flight: wanted {number('wanted')}, the client had {number('client')}, {engine}"
