"""``specops sim serve|validate|bench-speed``: the shell around the simulated engine."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

import click
import yaml

from specops.errors import EngineConfigError
from specops.vllm import full_flag, vllm_argv
from specops_lab.sim._jobs import default_jobs
from specops_lab.sim._truth import DEFAULT_TRUTH

__all__ = ["sim"]

_log = logging.getLogger("specops_lab.sim")


@click.group()
def sim() -> None:
    """The simulated vLLM engine."""


def _split_vllm_args(extra: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """vLLM's positional model (first bare word) and the flags we do not model."""
    if extra and not extra[0].startswith("-"):
        return extra[0], list(extra[1:])
    return None, list(extra)


def _read_config(path: str) -> Mapping[str, object]:
    """A ``--config`` file, as vLLM reads one: YAML (.yaml or .yml) holding a mapping."""
    if not path.endswith((".yaml", ".yml")):
        raise ValueError(f"--config {path}: the config file must be YAML (.yaml or .yml)")
    try:
        config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"--config {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"--config {path} must hold a mapping of flags to values")
    return config


class _VllmCommand(click.Command):
    """A command that reads its arguments as ``vllm serve`` does: a ``--config`` file,
    underscores for dashes, dotted JSON keys and abbreviated flags (``--por=9000``), so a
    spelling that would set a flag in vLLM sets it here too."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        flags = [
            name
            for param in self.params
            if isinstance(param, click.Option)
            for name in param.opts
            if name.startswith("--")
        ]
        try:
            read = [full_flag(arg, flags) for arg in vllm_argv(args, _read_config)]
        except ValueError as exc:
            raise click.UsageError(str(exc), ctx) from exc
        return super().parse_args(ctx, read)


@sim.command(cls=_VllmCommand, context_settings={"ignore_unknown_options": True})
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
@click.option("--model", "model_option", help="Model name (as vllm serve's positional MODEL).")
@click.option("--served-model-name", help="Name clients use (default: the model).")
@click.option("--host", default="0.0.0.0", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--tensor-parallel-size", "-tp", default=1, show_default=True, type=int)
@click.option("--max-num-seqs", type=int, help="Default 1024 (vLLM on H100).")
@click.option("--max-model-len", type=int, help="Default 131072.")
@click.option("--max-num-batched-tokens", type=int, help="Default 8192.")
@click.option("--speculative-config", help="vLLM's --speculative-config JSON.")
@click.option(
    "--truth",
    default=DEFAULT_TRUTH,
    show_default=True,
    help="The engine's physics: a shipped truth's name or a truth YAML file.",
)
@click.option(
    "--slow-pod",
    is_flag=True,
    help="Run every step slower by the truth's slow_pod_factor (one slow pod among several).",
)
@click.option("--workload", default="sharegpt", show_default=True, help="Name or YAML/JSON file.")
@click.option("--startup-delay", default=0.0, show_default=True, type=float, help="Seconds.")
@click.option(
    "--shutdown-timeout",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Seconds running requests may take to finish after SIGTERM (as vLLM's); 0 aborts them.",
)
@click.option("--seed", default=0, show_default=True, type=int)
def serve(
    extra: tuple[str, ...],
    model_option: str | None,
    served_model_name: str | None,
    host: str,
    port: int,
    tensor_parallel_size: int,
    max_num_seqs: int | None,
    max_model_len: int | None,
    max_num_batched_tokens: int | None,
    speculative_config: str | None,
    truth: str,
    slow_pod: bool,
    workload: str,
    startup_delay: float,
    shutdown_timeout: int,
    seed: int,
) -> None:
    """Serve vLLM's OpenAI API and /metrics from the simulated engine (flags as vllm serve)."""
    from specops_lab.sim._engine import EngineConfig, SimulatedEngine, parse_speculative_config
    from specops_lab.sim._server import ServerOptions, build_app, serve
    from specops_lab.sim._truth import load_truth
    from specops_lab.sim._workload import Workload, load_workload

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    positional, unknown = _split_vllm_args(extra)
    model = positional or model_option
    if model is None:
        raise click.UsageError("a model is required: specops sim serve MODEL or --model MODEL")
    if unknown:
        _log.warning("ignoring vLLM arguments the simulation does not model: %s", " ".join(unknown))
    try:
        chosen = load_truth(truth)
        if tensor_parallel_size != chosen.tensor_parallel_size:
            _log.warning(
                "--tensor-parallel-size %d differs from truth %s (%d); timing follows the truth",
                tensor_parallel_size,
                chosen.name,
                chosen.tensor_parallel_size,
            )
        defaults = EngineConfig()
        config = EngineConfig(
            served_model_name=served_model_name or model,
            max_num_seqs=max_num_seqs or defaults.max_num_seqs,
            max_model_len=max_model_len or defaults.max_model_len,
            max_num_batched_tokens=max_num_batched_tokens or defaults.max_num_batched_tokens,
            speculative=parse_speculative_config(speculative_config),
        )
        engine = SimulatedEngine(
            Workload(load_workload(workload), seed=seed),
            config,
            truth=chosen,
            track_tokens=True,
            seed=seed,
            slowdown=chosen.slow_pod_factor if slow_pod else 1.0,
        )
    except EngineConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    options = ServerOptions(config.served_model_name, model, startup_delay, shutdown_timeout)
    asyncio.run(serve(build_app(engine, options), host, port))


@sim.command()
@click.option(
    "--out", "--output-dir", "out", default="out/validate", show_default=True, type=click.Path()
)
@click.option(
    "--truth",
    "truths",
    multiple=True,
    default=(DEFAULT_TRUTH,),
    show_default=True,
    help="A shipped truth's name or a truth file (repeatable); 'all': every shipped truth.",
)
@click.option("--workload", default="sharegpt", show_default=True)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--jobs",
    default=default_jobs(),
    show_default=True,
    type=click.IntRange(min=1),
    help="Processes measuring the (batch, k) runs side by side; the table is the same.",
)
def validate(out: str, truths: tuple[str, ...], workload: str, seed: int, jobs: int) -> None:
    """Measure each truth in the engine beside published figures: validation.md and PNGs."""
    from specops_lab.sim._validate import load_truths, render_markdown, validate_truth, write_report

    try:
        validations = []
        for truth in load_truths(truths):
            validations.append(validate_truth(truth, workload=workload, seed=seed, jobs=jobs))
            click.echo(render_markdown(validations[-1]))
    except EngineConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    written = write_report(validations, Path(out))
    click.echo("wrote " + ", ".join(str(path) for path in written))


@sim.command("bench-speed")
@click.option("--output", default="out/sim-speed.json", show_default=True, type=click.Path())
@click.option(
    "--truth",
    "truths",
    multiple=True,
    default=("all",),
    show_default=True,
    help="A shipped truth's name or a truth file (repeatable); 'all': every shipped truth.",
)
@click.option(
    "--batch",
    "batches",
    multiple=True,
    type=click.IntRange(min=1),
    help="Concurrency of the closed loop (repeatable; default 1, 32, 128 and 256).",
)
@click.option("-k", "k", default=3, show_default=True, type=int)
@click.option("--simulated-seconds", default=600.0, show_default=True, type=float)
@click.option(
    "--stepping",
    type=click.Choice(["bulk", "single"]),
    default="bulk",
    show_default=True,
    help="Run steps a stretch at a time, or one by one (the reference).",
)
@click.option(
    "--repeats",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Runs per case; the fastest counts (others' work only slows a run down).",
)
def bench_speed(
    output: str,
    truths: tuple[str, ...],
    batches: tuple[int, ...],
    k: int,
    simulated_seconds: float,
    stepping: str,
    repeats: int,
) -> None:
    """Simulated seconds per second of one engine, per truth and batch, against the target."""
    from specops_lab.sim._speed import (
        BATCHES,
        TARGET_RATIO,
        measure_speed,
        speed_table,
        write_speed,
    )
    from specops_lab.sim._truth import truth_names

    names = truth_names() if "all" in truths else truths
    results = []
    try:
        for truth in names:
            for batch in batches or BATCHES:
                results.append(
                    measure_speed(
                        batch=batch,
                        k=k,
                        simulated_s=simulated_seconds,
                        truth=truth,
                        stepping="single" if stepping == "single" else "bulk",
                        repeats=repeats,
                    )
                )
                r = results[-1]
                _log.info("%s batch %d: %.0fx real time (cpu)", truth, batch, r.cpu_ratio)
    except EngineConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    write_speed(results, Path(output))
    click.echo(speed_table(results))
    met = sum(r.met for r in results)
    click.echo(
        f"target {TARGET_RATIO:.0f}x real time (judged on CPU time): met in {met} of "
        f"{len(results)} cases; wrote {output}"
    )
