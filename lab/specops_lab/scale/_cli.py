"""``specops scale``: one operator and a fleet of SpeculativeServices on the local control
plane; prints each fleet target met or missed and writes the table to ``--out``."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from specops.errors import ClusterError
from specops_lab.launch import LaunchError
from specops_lab.scale._figures import ScaleTargets, judge, render_table
from specops_lab.scale._run import ScaleOptions, run_scale

__all__ = ["scale"]

_DEFAULTS = ScaleOptions()


@click.command("scale")
@click.option(
    "--services",
    type=click.IntRange(min=1),
    default=_DEFAULTS.services,
    show_default=True,
    help="SpeculativeServices created before the steady window.",
)
@click.option(
    "--pods-per-service",
    type=click.IntRange(min=1),
    default=_DEFAULTS.pods_per_service,
    show_default=True,
    help="Replicas of each service (one fake GPU each).",
)
@click.option(
    "--gpu-nodes",
    type=click.IntRange(min=1),
    default=_DEFAULTS.gpu_nodes,
    show_default=True,
    help="Fake GPU nodes the pods spread over.",
)
@click.option(
    "--burst",
    type=click.IntRange(min=1),
    default=_DEFAULTS.burst,
    show_default=True,
    help="Services created at once while a user edits others.",
)
@click.option(
    "--edits",
    type=click.IntRange(min=1),
    default=_DEFAULTS.edits,
    show_default=True,
    help="Most edits timed during the burst (one at a time).",
)
@click.option(
    "--steady",
    "steady_s",
    type=click.FloatRange(min=10.0),
    default=_DEFAULTS.steady_s,
    show_default=True,
    help="Seconds of the steady window whose requests are counted.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=30.0),
    default=_DEFAULTS.timeout_s,
    show_default=True,
    help="Most seconds a phase may take before its target counts as missed.",
)
@click.option(
    "--shard-replicas",
    type=click.IntRange(min=0),
    default=_DEFAULTS.shard_replicas,
    show_default=True,
    help="Replicas of the sharded phase (the chart's operator.sharding), one of which is"
    " killed; 0 skips the phase.",
)
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=_DEFAULTS.shards,
    show_default=True,
    help="Shards the sharded phase's replicas share.",
)
@click.option(
    "--shard-lease-seconds",
    "shard_lease_s",
    type=click.FloatRange(min=3.0),
    default=_DEFAULTS.shard_lease_s,
    show_default=True,
    help="The shard Leases' period: a killed replica's shards should move within it.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("scale-results"),
    show_default=True,
    help="Where results.md, figures.yaml and the operator's logs go.",
)
@click.option("--check", is_flag=True, help="Exit 1 when a target is missed.")
def scale(
    services: int,
    pods_per_service: int,
    gpu_nodes: int,
    burst: int,
    edits: int,
    steady_s: float,
    timeout_s: float,
    shard_replicas: int,
    shards: int,
    shard_lease_s: float,
    out: Path,
    check: bool,
) -> None:
    """Measure one operator carrying a fleet: time to create it, steady API traffic, memory,
    a user's edit during a burst of creations, and a restart; then replicas sharing the
    fleet by shards, one of them killed.

    Runs its own local control plane (built on first use), the chart, and the operator as a
    local process acting as the chart's ServiceAccount; the API server's audit log counts
    the operator's requests.
    """
    options = ScaleOptions(
        services=services,
        pods_per_service=pods_per_service,
        gpu_nodes=gpu_nodes,
        burst=burst,
        edits=edits,
        steady_s=steady_s,
        timeout_s=timeout_s,
        shard_replicas=shard_replicas,
        shards=shards,
        shard_lease_s=shard_lease_s,
    )
    if shard_replicas == 1:
        raise click.UsageError("--shard-replicas 1 has no replica to kill: use 0 or at least 2")
    try:
        figures = run_scale(options, out, lambda message: click.echo(message, err=True))
    except (ClusterError, LaunchError) as exc:
        raise click.ClickException(str(exc)) from exc
    targets = ScaleTargets()
    command = shlex.join(["specops", *sys.argv[1:]])
    table = render_table(figures, targets, command)
    (out / "results.md").write_text(table)
    click.echo(table)
    verdicts = judge(figures, targets)
    missed = [t.name for t in verdicts if not t.met]
    click.echo(f"targets met: {len(verdicts) - len(missed)} of {len(verdicts)}", err=True)
    if missed and check:
        sys.exit(1)
