"""``specops sidecar``: measure one vLLM pod and serve the estimates."""

from __future__ import annotations

import functools
import logging
import socket
from collections.abc import Callable

import aiohttp
import click
from aiohttp import web

from specops.errors import SpecopsError
from specops.observation import (
    EngineMetricsSource,
    HttpGet,
    MetricsSource,
    ObserverConfig,
    PrometheusSource,
    WindowedObserver,
    label_matchers,
)
from specops.policy import StepCostModel
from specops.profiles import find_profile, profile_names
from specops.vllm import MAX_NUM_SEQS_DEFAULT, SpeculativeConfig
from specops_sidecar._http import aiohttp_get
from specops_sidecar._server import build_app

__all__ = ["sidecar"]

log = logging.getLogger("specops.sidecar")


def _matchers(
    pairs: tuple[str, ...], namespace: str, pod: str
) -> dict[str, str] | tuple[tuple[str, str, str], ...]:
    if not pairs:
        return {"namespace": namespace, "pod": pod}
    try:
        return label_matchers(pairs)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--match") from exc


def _cost_model(
    profile: str | None, model: str | None, gpu: str | None, tp: int, method: str
) -> StepCostModel | None:
    """The named profile's cost model, or the one derived for the model on the GPU."""
    if profile is None and (model is None or gpu is None):
        return None
    found = find_profile(profile, model=model or "", tensor_parallel_size=tp, gpu=gpu)
    if found is None:
        raise click.UsageError(
            f"no performance profile for model {model!r} on {gpu!r}: name one with --profile"
        )
    return found.cost_model(method)


@click.command("sidecar")
@click.option(
    "--engine-url",
    default="http://127.0.0.1:8000",
    show_default=True,
    help="The vLLM server; its /metrics is read in direct mode.",
)
@click.option(
    "--prometheus-url",
    default=None,
    help="Prometheus base URL; when given, the default source is Prometheus.",
)
@click.option(
    "--source",
    "source_kind",
    type=click.Choice(["auto", "direct", "prometheus"]),
    default="auto",
    show_default=True,
)
@click.option(
    "--match",
    "match_pairs",
    multiple=True,
    metavar="LABEL=VALUE",
    help="Prometheus label matchers (repeat; =, !=, =~ or !~); default namespace and pod.",
)
@click.option("--namespace", envvar="POD_NAMESPACE", default="default", show_default=True)
@click.option("--pod", envvar="POD_NAME", default=socket.gethostname(), show_default=True)
@click.option("--service", default="", help="The SpeculativeService the pod belongs to.")
@click.option("--host", default="0.0.0.0", show_default=True)
@click.option("--port", default=9090, show_default=True, type=int)
@click.option(
    "--scrape-interval",
    default=15.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="Seconds between reads of the source.",
)
@click.option(
    "--window",
    "windows",
    multiple=True,
    type=click.FloatRange(1.0),
    default=(60.0, 300.0, 900.0),
    show_default=True,
    help="Window length in seconds (repeat for several).",
)
@click.option(
    "--prediction-window",
    default=300.0,
    show_default=True,
    type=float,
    help="The window (one of --window) behind the predictions.",
)
@click.option(
    "--stale-after",
    default=None,
    type=click.FloatRange(0.1),
    help="Seconds without a fresh reading before estimates are stale "
    "[default: 3 scrape intervals].",
)
@click.option(
    "--profile",
    type=click.Choice(profile_names()),
    default=None,
    help="Performance profile: the prior of the step-time fit; none, no predictions.",
)
@click.option(
    "--model",
    default=None,
    help="The target model: with --gpu, its prior is derived when no --profile is named.",
)
@click.option("--gpu", default=None, help="The GPU the engine runs on (spec.engine.gpu).")
@click.option("-tp", "--tensor-parallel-size", default=1, show_default=True, type=int)
@click.option(
    "--method",
    default="eagle3",
    show_default=True,
    help="The speculative method the engine runs (selects the profile's draft cost).",
)
@click.option(
    "--context-tokens",
    default=1024.0,
    show_default=True,
    type=click.FloatRange(0.0),
    help="Typical context tokens per running request, for the cost model.",
)
@click.option(
    "--speculative-config",
    "speculative_config",
    default=None,
    help="vLLM's --speculative-config as the engine was started with; needed when it sets "
    "num_speculative_tokens_per_batch_size, so acceptance is corrected for the drafts the "
    "table cuts short.",
)
@click.option("--max-k", default=8, show_default=True, type=click.IntRange(1, 32))
@click.option(
    "--max-num-seqs",
    default=MAX_NUM_SEQS_DEFAULT,
    show_default=True,
    type=click.IntRange(1, 65536),
    help="The engine's --max-num-seqs: the largest batch the predictions and crossovers reach.",
)
@click.option("--log-level", default="INFO", show_default=True)
def sidecar(
    engine_url: str,
    prometheus_url: str | None,
    source_kind: str,
    match_pairs: tuple[str, ...],
    namespace: str,
    pod: str,
    service: str,
    host: str,
    port: int,
    scrape_interval: float,
    windows: tuple[float, ...],
    prediction_window: float,
    stale_after: float | None,
    profile: str | None,
    model: str | None,
    gpu: str | None,
    tensor_parallel_size: int,
    method: str,
    context_tokens: float,
    speculative_config: str | None,
    max_k: int,
    max_num_seqs: int,
    log_level: str,
) -> None:
    """Turn a vLLM pod's counters into windowed estimates on /metrics and /v1/observation."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    if source_kind == "auto":
        source_kind = "prometheus" if prometheus_url else "direct"
    matchers = _matchers(match_pairs, namespace, pod)
    try:
        config = ObserverConfig(
            namespace=namespace,
            pod=pod,
            service=service,
            windows_s=tuple(sorted(set(windows))),
            prediction_window_s=prediction_window,
            stale_after_s=stale_after if stale_after is not None else 3 * scrape_interval,
            max_k=max_k,
            max_batch=max_num_seqs,
            method=method,
            context_tokens_per_request=context_tokens,
            cost_model=_cost_model(profile, model, gpu, tensor_parallel_size, method),
            speculation=SpeculativeConfig.from_json(speculative_config).in_force()
            if speculative_config
            else None,
        )
    except (ValueError, SpecopsError) as exc:
        raise click.UsageError(str(exc)) from exc
    connect: Callable[[HttpGet], MetricsSource]
    if source_kind == "prometheus":
        if not prometheus_url:
            raise click.UsageError("the Prometheus source needs --prometheus-url")
        lookback = max(4 * scrape_interval, 60.0)
        connect = functools.partial(
            PrometheusSource,
            prometheus_url,
            matchers,
            lookback_s=lookback,
            history_s=max(config.windows_s),
        )
    else:
        connect = functools.partial(EngineMetricsSource, engine_url)

    async def serve() -> web.Application:
        """The app, built inside the event loop that the client session must belong to."""
        client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(min(scrape_interval, 10.0)))
        observer = WindowedObserver(connect(aiohttp_get(client)), config, logger=log)
        app = build_app(observer, scrape_interval)

        async def close_client(_: web.Application) -> None:
            await client.close()

        app.on_cleanup.append(close_client)  # runs after the poll loop has stopped
        return app

    web.run_app(serve(), host=host, port=port, print=None, access_log=None)
