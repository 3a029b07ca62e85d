"""``specops advise``: read the selected pods' counters from Prometheus once, print the advice."""

from __future__ import annotations

import asyncio
import time

import click
import httpx

from specops.advise._advice import Advice, AdviceInput, advise, speculation_given
from specops.advise._text import advice_text
from specops.control import service_model
from specops.errors import SpecopsError
from specops.observation import (
    ObserverConfig,
    PodObservation,
    PrometheusSource,
    WindowedObserver,
    label_matchers,
)
from specops.observation.httpx_get import httpx_get
from specops.policy import SpecConfig
from specops.profiles import (
    PerformanceProfile,
    find_profile,
    gpu_names,
    model_shapes,
    profile_names,
)
from specops.vllm import MAX_NUM_SEQS_DEFAULT

__all__ = ["advise_command"]


async def _observe(
    prometheus_url: str,
    matchers: tuple[tuple[str, str, str], ...],
    config: ObserverConfig,
    timeout_s: float,
) -> PodObservation:
    """One read of the window's scrapes; Prometheus kept them, so nothing is waited for."""
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        window = max(config.windows_s)
        source = PrometheusSource(
            prometheus_url, matchers, httpx_get(client), lookback_s=60.0, history_s=window
        )
        observer = WindowedObserver(source, config)
        await observer.poll()
        observation = observer.observation
        if observation.source.error:
            raise click.ClickException(f"reading Prometheus: {observation.source.error}")
        return observation


def _profile(
    name: str | None, model: str | None, gpu: str | None, tensor_parallel_size: int
) -> PerformanceProfile:
    found = find_profile(
        name, model=model or "", tensor_parallel_size=tensor_parallel_size, gpu=gpu
    )
    if found is None:
        raise click.UsageError(
            f"no performance profile for model {model!r} at tensor parallel size "
            f"{tensor_parallel_size} on {gpu or 'an unnamed GPU'}: name one with --profile "
            f"({', '.join(profile_names())}), or give --model (one of "
            f"{', '.join(sorted(model_shapes()))}) and --gpu ({', '.join(gpu_names())})"
        )
    return found


@click.command("advise")
@click.option("--prometheus-url", required=True, help="Prometheus base URL.")
@click.option(
    "--match",
    "match_pairs",
    multiple=True,
    required=True,
    metavar="LABEL=VALUE",
    help="Label matchers selecting the vLLM pods' series (repeat; =, !=, =~ or !~), "
    "e.g. --match namespace=ml --match 'pod=~llama-.*'.",
)
@click.option(
    "--window",
    default=900.0,
    show_default=True,
    type=click.FloatRange(30.0),
    help="Seconds of history to read; the load should be typical over it.",
)
@click.option("--profile", type=click.Choice(profile_names()), default=None)
@click.option("--model", default=None, help="The target model, to find its profile.")
@click.option(
    "--gpu",
    default=None,
    help="The GPU the pods run on: with --model, a prior is derived for a model the catalog lacks.",
)
@click.option("-tp", "--tensor-parallel-size", default=1, show_default=True, type=int)
@click.option(
    "--speculative-config",
    "speculative_config",
    default=None,
    help="vLLM's --speculative-config as the pods run it: needed for a per-batch-size "
    "table, which the counters do not show; the recommendation keeps its other keys.",
)
@click.option(
    "--method",
    default=None,
    help="The speculative method [default: from --speculative-config, else eagle3].",
)
@click.option(
    "--context-tokens",
    default=1024.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Context a running request holds, assumed only where the engines' KV-cache usage "
    "was not measured (it is read against the pool vllm:cache_config_info reports).",
)
@click.option(
    "--max-num-seqs",
    "--max-batch",
    "max_batch",
    default=MAX_NUM_SEQS_DEFAULT,
    show_default=True,
    type=click.IntRange(1, 65536),
    help="The engine's --max-num-seqs: the largest batch the advice and crossovers reach.",
)
@click.option("--timeout", default=30.0, show_default=True, type=click.FloatRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print the advice as JSON.")
def advise_command(
    prometheus_url: str,
    match_pairs: tuple[str, ...],
    window: float,
    profile: str | None,
    model: str | None,
    gpu: str | None,
    tensor_parallel_size: int,
    speculative_config: str | None,
    method: str | None,
    context_tokens: float,
    max_batch: int,
    timeout: float,
    as_json: bool,
) -> None:
    """Advise on speculative decoding for vLLM pods specops did not create.

    Reads the pods' own counters from Prometheus over the window, and prints what was
    measured, the crossover per k and the config the controller would run, with its
    predicted gain. Exits 1 when the window held nothing to decide on.
    """
    try:
        matchers = label_matchers(match_pairs)
        given: SpecConfig | None = None
        raw: dict[str, object] | None = None
        if speculative_config is not None:
            raw, given, given_method = speculation_given(speculative_config)
            method = method or given_method
        method = method or "eagle3"
        found = _profile(profile, model, gpu, tensor_parallel_size)
        config = ObserverConfig(
            namespace="",
            pod=None,
            service="",
            windows_s=(window,),
            prediction_window_s=window,
            stale_after_s=max(window, 120.0),
            method=method,
            context_tokens_per_request=context_tokens,
            cost_model=found.cost_model(method),
            speculation=given,
        )
        observation = asyncio.run(_observe(prometheus_url, matchers, config, timeout))
        inputs = AdviceInput(
            target=f"{prometheus_url} {{{', '.join(match_pairs)}}}",
            window_s=window,
            method=method,
            service=service_model(found, method, max_batch=max_batch),
            given_config=raw,
            kv_capacity_tokens=found.kv_capacity(method),
            default_context_tokens=context_tokens,
        )
        advice: Advice = advise(observation, inputs, time.time(), given)
    except (ValueError, SpecopsError) as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(advice.model_dump_json(indent=2) if as_json else advice_text(advice), nl=as_json)
    if advice.recommendation is None:
        raise SystemExit(1)
