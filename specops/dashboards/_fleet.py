"""The fleet dashboard: every SpeculativeService side by side, and what specops did to each."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from specops.dashboards import _promql as q
from specops.dashboards._panels import (
    RATE,
    Query,
    datasource_variable,
    label_variable,
    table_panel,
    timeseries_panel,
)

__all__ = ["FLEET_UID", "fleet"]

FLEET_UID = "specops-fleet"
SELECTOR = 'namespace=~"$namespace", service=~"$service"'
BY_SERVICE = ("namespace", "service")
LEGEND = "{{namespace}}/{{service}}"


def fleet() -> db.Dashboard:
    """Build the fleet dashboard over the selected namespaces and SpeculativeServices."""
    acceptance = q.acceptance_length(SELECTOR, RATE, BY_SERVICE)
    concurrency = f"avg by (namespace, service) ({q.VLLM_RUNNING}{{{SELECTOR}}})"
    tpot_p90 = q.histogram_quantile(0.9, q.VLLM_TPOT, SELECTOR, RATE, BY_SERVICE)
    throughput = q.rate_sum(q.VLLM_GENERATION_TOKENS, SELECTOR, RATE, BY_SERVICE)
    running_k = f"max by (namespace, service) ({q.SIDECAR_CONFIGURED_K}{{{SELECTOR}}})"
    recommended_k = f"max by (namespace, service) ({q.SIDECAR_RECOMMENDED_K}{{{SELECTOR}}})"
    restarts = f"sum by (namespace, service) (resets({q.VLLM_GENERATION_TOKENS}{{{SELECTOR}}}[1h]))"
    not_usable = (
        f"1 - min by (namespace, service, estimate) ({q.SIDECAR_ESTIMATE_OK}{{{SELECTOR}}})"
    )
    return (
        db.Dashboard("specops / Fleet")
        .uid(FLEET_UID)
        .description("All SpeculativeServices side by side: acceptance, load, latency, decisions.")
        .tags(["specops", "vllm", "speculative-decoding"])
        .editable()
        .time("now-6h", "now")
        .refresh("1m")
        .timezone("browser")
        .with_variable(datasource_variable())
        .with_variable(
            label_variable(
                "namespace",
                "Namespace",
                f"{q.VLLM_RUNNING}{{service!=''}}",
                multi=True,
                description="Namespaces to include.",
            )
        )
        .with_variable(
            label_variable(
                "service",
                "SpeculativeService",
                f'{q.VLLM_RUNNING}{{namespace=~"$namespace"}}',
                multi=True,
                description="SpeculativeServices to include.",
            )
        )
        .with_row(db.Row("Services"))
        .with_panel(
            table_panel(
                "SpeculativeServices",
                "The current state of each service, one row each.",
                [
                    ("k", Query(running_k)),
                    ("Recommended k", Query(recommended_k)),
                    ("Acceptance length", Query(acceptance)),
                    ("Running per pod", Query(concurrency)),
                    ("TPOT p90 (s)", Query(tpot_p90)),
                    ("Tokens/s", Query(throughput)),
                ],
            )
        )
        .with_row(db.Row("Side by side"))
        .with_panel(
            timeseries_panel(
                "Mean acceptance length",
                "1 + accepted tokens per draft, per service.",
                [Query(acceptance, LEGEND)],
                unit="none",
                minimum=1,
            )
        )
        .with_panel(
            timeseries_panel(
                "Running requests per pod",
                "Mean batch size of each service's engines.",
                [Query(concurrency, LEGEND)],
                unit="short",
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Time per output token, p90",
                "90th percentile TPOT per service.",
                [Query(tpot_p90, LEGEND)],
                unit="s",
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Output throughput",
                "Generated tokens per second per service.",
                [Query(throughput, LEGEND)],
                unit="suffix: tok/s",
                minimum=0,
            )
        )
        .with_row(db.Row("Restarts and withheld decisions"))
        .with_panel(
            timeseries_panel(
                "Engine restarts in the past hour",
                "Counter resets of each service's engines: crashes and in-place restarts. "
                "Reconfigurations replace pods instead.",
                [Query(restarts, LEGEND)],
                unit="short",
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Estimates not usable, by kind",
                "Share of pods whose estimate is stale or unknown. The controller withholds "
                "decisions while the acceptance or load estimate is not usable.",
                [Query(not_usable, LEGEND + " {{estimate}}")],
                unit="percentunit",
                minimum=0,
            )
        )
    )
