"""``specops cluster``: the local control plane for e2e tests and the demo."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from specops.errors import ClusterError
from specops_lab.cluster import (
    CacheLayout,
    ClusterOptions,
    LocalCluster,
    ensure_binaries,
    service_account_kubeconfig,
    user_kubeconfig,
)

__all__ = ["cluster"]

_name_option = click.option(
    "--name",
    default="default",
    show_default=True,
    envvar="SPECOPS_CLUSTER",
    help="Cluster name; each name has its own run directory, ports and processes.",
)


def _progress(message: str) -> None:
    click.echo(message, err=True)


def _cluster(name: str) -> LocalCluster:
    return LocalCluster(ClusterOptions(name=name), progress=_progress)


def _export(kubeconfig: Path) -> str:
    return f"export KUBECONFIG={shlex.quote(str(kubeconfig))}"


@click.group("cluster")
def cluster() -> None:
    """Run a local Kubernetes control plane: real kube components, kwok GPU nodes.

    The first `up` builds kube-apiserver, kube-controller-manager and kube-scheduler
    from source (Go needed, minutes); later ones start in seconds.
    """


@cluster.command("build")
def build() -> None:
    """Build (or find cached) the control plane's binaries, without starting anything.

    CI runs this before the tests so that a cold build is not charged to one test's time.
    """
    try:
        binaries = ensure_binaries(CacheLayout.from_env(), ClusterOptions().versions, _progress)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"control plane binaries ready: {binaries.kube_apiserver.parent}")


@cluster.command("up")
@_name_option
@click.option("--gpu-nodes", default=2, show_default=True, help="Fake GPU nodes.")
@click.option("--gpus-per-node", default=8, show_default=True, help="nvidia.com/gpu per node.")
@click.option("--cpu-nodes", default=1, show_default=True, help="Fake nodes without GPUs.")
def up(name: str, gpu_nodes: int, gpus_per_node: int, cpu_nodes: int) -> None:
    """Start the cluster (or report the running one) and print its kubeconfig."""
    options = ClusterOptions(
        name=name, gpu_nodes=gpu_nodes, gpus_per_node=gpus_per_node, cpu_nodes=cpu_nodes
    )
    try:
        info = LocalCluster(options, progress=_progress).up()
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"kubeconfig: {info.kubeconfig}")
    click.echo(_export(info.kubeconfig))


@cluster.command("down")
@_name_option
def down(name: str) -> None:
    """Stop every process of the cluster and delete its run directory."""
    stopped = _cluster(name).down()
    click.echo(f"cluster {name!r} stopped" if stopped else f"cluster {name!r} was not running")


@cluster.command("status")
@_name_option
def status(name: str) -> None:
    """Show each component's process and whether the API server is ready (exit 1 if not)."""
    current = _cluster(name).status()
    if current is None:
        raise click.ClickException(f"cluster {name!r} is not running")
    click.echo(f"cluster {name!r}: API server {current.info.server}")
    for component in current.components:
        state = "running" if component.running else "STOPPED"
        click.echo(f"  {component.name:<24} pid {component.pid:<8} {state:<8} {component.log}")
    click.echo(f"  ready: {'yes' if current.api_ready else 'no'}")
    click.echo(f"  kubeconfig: {current.info.kubeconfig}")
    if not (current.api_ready and all(c.running for c in current.components)):
        raise SystemExit(1)


@cluster.command("env")
@_name_option
def env(name: str) -> None:
    """Print `export KUBECONFIG=...` for the cluster: eval "$(specops cluster env)"."""
    current = _cluster(name).status()
    if current is None:
        raise click.ClickException(f"cluster {name!r} is not running; run `specops cluster up`")
    click.echo(_export(current.info.kubeconfig))


@cluster.command("kubeconfig")
@_name_option
@click.option("--service-account", metavar="NAMESPACE/NAME", help="Act as this ServiceAccount.")
@click.option("--user", help="Act as this user (client certificate from the cluster's CA).")
@click.option("--group", "groups", multiple=True, help="Group of --user; repeatable.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), required=True)
def kubeconfig(
    name: str, service_account: str | None, user: str | None, groups: tuple[str, ...], output: Path
) -> None:
    """Write a kubeconfig for a restricted identity, e.g. the operator's ServiceAccount."""
    if (service_account is None) == (user is None):
        raise click.UsageError("give exactly one of --service-account or --user")
    current = _cluster(name).status()
    if current is None:
        raise click.ClickException(f"cluster {name!r} is not running; run `specops cluster up`")
    try:
        if service_account is not None:
            namespace, sep, account = service_account.partition("/")
            if not sep or not namespace or not account:
                raise click.BadParameter("expected NAMESPACE/NAME", param_hint="--service-account")
            text = service_account_kubeconfig(current.info.kubeconfig, namespace, account)
        else:
            assert user is not None
            text = user_kubeconfig(_cluster(name).files, current.info.server, user, groups)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    output.write_text(text)
    output.chmod(0o600)
    click.echo(_export(output))
