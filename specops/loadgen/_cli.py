"""``specops load``: closed or open loop against an OpenAI-compatible URL, JSON out."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import click

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

    from specops.loadgen._arrivals import poisson_arrivals, trace_arrivals
    from specops.loadgen._client import LoadTarget, run_closed_loop, run_open_loop
    from specops.loadgen._stats import RequestRecord, summarize

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
        if concurrency is not None:
            records = asyncio.run(
                run_closed_loop(
                    target,
                    concurrency,
                    num_requests=num_requests,
                    duration_s=duration,
                    progress=advance,
                )
            )
        else:
            records = asyncio.run(run_open_loop(target, arrivals, progress=advance))
        elapsed = time.perf_counter() - started
    summary = summarize(records, elapsed)
    text = json.dumps(summary, indent=2)
    if output:
        Path(output).write_text(text + "\n", encoding="utf-8")
    click.echo(text)
