"""``specops operator``: run the kopf operator with its metrics endpoint."""

from __future__ import annotations

import click
import kopf
import prometheus_client

from specops.render import RenderOptions

__all__ = ["operator", "settings_for"]

_GLOB = set("*?[")


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
@click.option("--metrics-port", default=8080, show_default=True, type=int, help="0 disables.")
@click.option(
    "--liveness",
    default="http://0.0.0.0:8081/healthz",
    show_default=True,
    help="Liveness endpoint URL served by kopf.",
)
@click.option("--sidecar-image", default=RenderOptions.sidecar_image, show_default=True)
@click.option("--verbose", is_flag=True, help="Log at debug level.")
@click.option("--log-format", type=click.Choice(["full", "plain", "json"]), default="full")
def operator(
    namespaces: tuple[str, ...],
    peering: str | None,
    metrics_port: int,
    liveness: str,
    sidecar_image: str,
    verbose: bool,
    log_format: str,
) -> None:
    """Reconcile SpeculativeServices into vLLM Deployments with the specops sidecar."""
    import specops_operator._handlers  # noqa: F401  (registers the handlers)

    # kopf.run does not set up logging itself; without this a failing operator is silent.
    kopf.configure(verbose=verbose, log_format=kopf.LogFormat[log_format.upper()])
    if metrics_port:
        prometheus_client.start_http_server(metrics_port)
    kopf.run(
        clusterwide=not namespaces,
        namespaces=list(namespaces),
        settings=settings_for(namespaces),
        peering_name=peering,
        standalone=peering is None,
        liveness_endpoint=liveness,
        memo=kopf.Memo(options=RenderOptions(sidecar_image=sidecar_image)),
    )
