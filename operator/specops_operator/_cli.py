"""``specops operator``: run the kopf operator with its metrics endpoint."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Mapping

import click
import kopf
import prometheus_client

from specops.render import RenderOptions
from specops_operator._kube import DISCOVERY_REFRESH_S, KUBE_BURST, KUBE_QPS
from specops_operator._shards import ShardSettings

__all__ = ["operator", "peering_priority", "settings_for", "shard_settings"]

_GLOB = set("*?[")
_PRIORITIES = 2**31


def settings_for(namespaces: tuple[str, ...]) -> kopf.OperatorSettings:
    """kopf's settings for the namespaces served.

    Given exact namespaces, kopf need not watch namespaces and CRDs across the cluster to
    find what to serve, so it does not: the chart's namespaced RBAC grants no cluster-scoped
    read, and without this kopf retries those reads at start and logs 403s. Globs and the
    cluster-wide mode keep the scanning, which their RBAC allows."""
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = bool(namespaces) and not any(
        _GLOB & set(namespace) for namespace in namespaces
    )
    return settings


def peering_priority(peering: str | None, given: int | None) -> int:
    """The priority given, else with peering a random one: kopf pauses every operator of a
    tied priority, so replicas of one Deployment, which share their arguments, must differ."""
    if given is not None:
        return given
    return secrets.randbelow(_PRIORITIES) if peering is not None else 0


def shard_settings(
    shards: int, group: str, lease_s: float, environ: Mapping[str, str]
) -> ShardSettings | None:
    """The sharded mode's settings (None for 0 shards): this replica is its pod (the chart
    sets POD_NAME and POD_NAMESPACE), else this host's process, with its Leases in the
    default namespace."""
    if shards == 0:
        return None
    identity = environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    namespace = environ.get("POD_NAMESPACE") or "default"
    return ShardSettings(
        shards=shards, identity=identity, namespace=namespace, group=group, lease_s=lease_s
    )


@click.command("operator")
@click.option(
    "-n",
    "--namespace",
    "namespaces",
    multiple=True,
    help="Namespace (or glob) to serve; repeat for several. Default: all namespaces."
    " Globs need the cluster-wide RBAC to list namespaces.",
)
@click.option("--peering", default=None, help="kopf peering object, for HA with several replicas.")
@click.option(
    "--priority",
    type=click.IntRange(min=0),
    default=None,
    help="kopf peering priority: the live operator with the highest one acts, the others stand"
    " by. Default with --peering: a random one, so replicas never tie (kopf pauses every"
    " operator of a tied priority).",
)
@click.option("--metrics-port", default=8080, show_default=True, type=int, help="0 disables.")
@click.option(
    "--liveness",
    default="http://0.0.0.0:8081/healthz",
    show_default=True,
    help="Liveness endpoint URL served by kopf.",
)
@click.option("--sidecar-image", default=RenderOptions.sidecar_image, show_default=True)
@click.option(
    "--allowed-prometheus",
    "allowed_prometheus",
    multiple=True,
    help="A Prometheus the operator may read for specs with metrics.source Prometheus: a base"
    " URL (http://prometheus.monitoring:9090) or a host (any port); repeat for several."
    " Default: none, so such specs hold their config and say why.",
)
@click.option(
    "--manage-crd",
    is_flag=True,
    help="At start, server-side apply the SpeculativeService CRD at this operator's schema"
    " (Helm never upgrades a chart's crds/); needs get and patch on that CRD.",
)
@click.option(
    "--discovery-refresh",
    "discovery_refresh_s",
    type=click.FloatRange(min=0),
    default=DISCOVERY_REFRESH_S,
    show_default=True,
    help="Seconds the operator trusts what API discovery said (whether the Prometheus"
    " Operator's PodMonitor is served), instead of asking at every reconciliation.",
)
@click.option(
    "--kube-qps",
    type=click.FloatRange(min=0),
    default=KUBE_QPS,
    show_default=True,
    help="Requests a second the operator sends the Kubernetes API at most, on average"
    " (reconciliations and the control loop; kopf's watches and Events are apart). 0: no limit.",
)
@click.option(
    "--kube-burst",
    type=click.IntRange(min=1),
    default=KUBE_BURST,
    show_default=True,
    help="Requests the operator may send at once above --kube-qps after a quiet spell.",
)
@click.option(
    "--shards",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Spread the services over this many shards, each held by one replica at a time"
    " through a Lease (replicas take a fair share each, and a lost replica's share moves"
    " to the others). 0: one operator serves every service.",
)
@click.option(
    "--shard-group",
    default="specops",
    show_default=True,
    help="Prefix of the shard Leases (in the namespace of POD_NAMESPACE): the replicas of one"
    " Deployment share it.",
)
@click.option(
    "--shard-lease-seconds",
    "shard_lease_s",
    type=click.FloatRange(min=3),
    default=15.0,
    show_default=True,
    help="Seconds a shard stays with a replica that stopped renewing its Lease.",
)
@click.option("--verbose", is_flag=True, help="Log at debug level.")
@click.option("--log-format", type=click.Choice(["full", "plain", "json"]), default="full")
def operator(
    namespaces: tuple[str, ...],
    peering: str | None,
    priority: int | None,
    metrics_port: int,
    liveness: str,
    sidecar_image: str,
    allowed_prometheus: tuple[str, ...],
    manage_crd: bool,
    discovery_refresh_s: float,
    kube_qps: float,
    kube_burst: int,
    shards: int,
    shard_group: str,
    shard_lease_s: float,
    verbose: bool,
    log_format: str,
) -> None:
    """Reconcile SpeculativeServices into vLLM Deployments with the specops sidecar."""
    if shards and peering is not None:
        raise click.UsageError(
            "--shards and --peering: choose one. Sharded replicas already take over a lost"
            " replica's share; peering would pause all but one of them."
        )
    import specops_operator._handlers  # noqa: F401  (registers the handlers)

    # kopf.run does not set up logging itself; without this a failing operator is silent.
    kopf.configure(verbose=verbose, log_format=kopf.LogFormat[log_format.upper()])
    if metrics_port:
        prometheus_client.start_http_server(metrics_port)
    priority = peering_priority(peering, priority)
    if peering is not None:
        logging.getLogger("specops.operator").info("peering %s at priority %d", peering, priority)
    kopf.run(
        clusterwide=not namespaces,
        namespaces=list(namespaces),
        settings=settings_for(namespaces),
        peering_name=peering,
        standalone=peering is None,
        priority=priority,
        liveness_endpoint=liveness,
        memo=kopf.Memo(
            options=RenderOptions(sidecar_image=sidecar_image),
            allowed_prometheus=allowed_prometheus,
            manage_crd=manage_crd,
            discovery_refresh_s=discovery_refresh_s,
            kube_qps=kube_qps,
            kube_burst=kube_burst,
            shards=shard_settings(shards, shard_group, shard_lease_s, os.environ),
        ),
    )
