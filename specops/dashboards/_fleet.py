"""The fleet dashboard: every SpeculativeService side by side, and what specops did to each."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from specops.dashboards import _promql as q
from specops.dashboards._panels import (
    FLEET_UID,
    OVERVIEW_UID,
    RATE,
    LabelColumn,
    Query,
    bar_gauge_panel,
    dashboard_link,
    datasource_variable,
    label_variable,
    table_panel,
    timeseries_panel,
)

__all__ = ["fleet"]

SELECTOR = 'namespace=~"$namespace", service=~"$service"'
BY_SERVICE = ("namespace", "service")
LEGEND = "{{namespace}}/{{service}}"
# Grafana's whole time range: totals "in the selected range" come from instant queries over it.
RANGE = "$__range"


def _per_service(aggregation: str, metric: str) -> str:
    return f"{aggregation} by (namespace, service) ({q.series(metric, SELECTOR)})"


def fleet() -> db.Dashboard:
    """Build the fleet dashboard over the selected namespaces and SpeculativeServices."""
    acceptance = q.acceptance_length(SELECTOR, RATE, BY_SERVICE)
    concurrency = _per_service("avg", q.VLLM_RUNNING)
    tpot_p90 = q.histogram_quantile(0.9, q.VLLM_TPOT, SELECTOR, RATE, BY_SERVICE)
    throughput = q.rate_sum(q.VLLM_GENERATION_TOKENS, SELECTOR, RATE, BY_SERVICE)
    running_k = _per_service("max", q.SIDECAR_CONFIGURED_K)
    recommended_k = _per_service("max", q.SIDECAR_RECOMMENDED_K)
    mode = f"max by (namespace, service, mode) ({q.series(q.OPERATOR_MODE, SELECTOR)} == 1)"
    k_in_force = _per_service("max", q.OPERATOR_SPECULATIVE_TOKENS)
    predicted_gain = _per_service("max", q.OPERATOR_PREDICTED_GAIN)
    reconfigurations = q.counted(q.OPERATOR_RECONFIGURATIONS, SELECTOR, RANGE, BY_SERVICE)
    rollbacks = q.counted(q.OPERATOR_ROLLBACKS, SELECTOR, RANGE, BY_SERVICE)
    withheld_selector = f'{SELECTOR}, action="Withhold"'
    withheld = q.counted(q.OPERATOR_DECISIONS, withheld_selector, RANGE, BY_SERVICE)
    withheld_why = q.counted(
        q.OPERATOR_DECISIONS, withheld_selector, RANGE, (*BY_SERVICE, "reason")
    )
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
        .link(
            dashboard_link(
                "Overview of one service",
                OVERVIEW_UID,
                "Acceptance, load, latency and decisions of one SpeculativeService",
            )
        )
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
                "The current state of each service, one row each: the mode and k the "
                "controller holds in force, the k the engines report running (they differ "
                "during a rollout), what the measurements recommend, and what the controller "
                "did in the selected range.",
                [
                    ("k in force", Query(k_in_force)),
                    ("k engines run", Query(running_k)),
                    ("Recommended k", Query(recommended_k)),
                    ("Reconfigurations", Query(reconfigurations)),
                    ("Rollbacks", Query(rollbacks)),
                    ("Withheld", Query(withheld)),
                    ("Acceptance length", Query(acceptance)),
                    ("Running per pod", Query(concurrency)),
                    ("TPOT p90 (s)", Query(tpot_p90)),
                    ("Tokens/s", Query(throughput)),
                ],
                label_columns=[LabelColumn("Mode", "mode", Query(mode))],
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
        .with_row(db.Row("Controller decisions"))
        .with_panel(
            bar_gauge_panel(
                "Decisions withheld, by reason",
                "Decisions the controller held back in the selected range, per service and "
                "reason code: a rollout in progress, missing or stale metrics, no cost model, "
                "too little load, an unconfirmed regime, unknown acceptance, a dwell, cap or "
                "cooldown rule, mode Advise.",
                Query(withheld_why, LEGEND + " {{reason}}"),
            )
        )
        .with_panel(
            timeseries_panel(
                "Predicted gain of the recommendation",
                "The recommended config's predicted gain over the one in force, as the "
                "controller computed it at each decision; a change must also pay for its restart.",
                [Query(predicted_gain, LEGEND)],
                unit="percentunit",
            )
        )
        .with_row(db.Row("Restarts and estimates"))
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
                "Sidecar estimates not usable, by kind",
                "Share of pods whose sidecar estimate is stale or unknown. Read directly from "
                "the sidecars, such a pod leaves the controller's sample; with none left it "
                "withholds (MetricsStale, MetricsUnavailable).",
                [Query(not_usable, LEGEND + " {{estimate}}")],
                unit="percentunit",
                minimum=0,
            )
        )
    )
