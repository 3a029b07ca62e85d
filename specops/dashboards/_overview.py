"""The per-service dashboard: does speculation pay at this load, and what did specops do."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from specops.dashboards import _promql as q
from specops.dashboards._panels import (
    RATE,
    Query,
    datasource_variable,
    label_variable,
    stat_panel,
    timeseries_panel,
)

__all__ = ["OVERVIEW_UID", "overview"]

OVERVIEW_UID = "specops-overview"
SELECTOR = 'namespace="$namespace", service="$service"'
QUANTILES = (0.5, 0.9, 0.99)


def _quantiles(metric: str) -> list[Query]:
    return [
        Query(q.histogram_quantile(quantile, metric, SELECTOR, RATE), f"p{round(quantile * 100)}")
        for quantile in QUANTILES
    ]


def overview() -> db.Dashboard:
    """Build the overview dashboard for one SpeculativeService."""
    acceptance = q.acceptance_length(SELECTOR, RATE)
    return (
        db.Dashboard("specops / Overview")
        .uid(OVERVIEW_UID)
        .description("One SpeculativeService: speculation, load, acceptance, latency, throughput.")
        .tags(["specops", "vllm", "speculative-decoding"])
        .editable()
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .with_variable(datasource_variable())
        .with_variable(
            label_variable(
                "namespace",
                "Namespace",
                f"{q.VLLM_RUNNING}{{service!=''}}",
                multi=False,
                description="Namespace of the SpeculativeService.",
            )
        )
        .with_variable(
            label_variable(
                "service",
                "SpeculativeService",
                f'{q.VLLM_RUNNING}{{namespace="$namespace"}}',
                multi=False,
                description="The SpeculativeService to show.",
            )
        )
        .with_row(db.Row("Speculation now"))
        .with_panel(
            stat_panel(
                "Mean acceptance length",
                "Tokens emitted per verification step: 1 + accepted draft tokens per draft.",
                Query(acceptance, "acceptance length"),
                decimals=2,
            )
        )
        .with_panel(
            stat_panel(
                "Running requests per pod",
                "Mean number of requests each engine decodes at once (its batch size).",
                Query(f"avg({q.VLLM_RUNNING}{{{SELECTOR}}})", "running"),
                decimals=1,
            )
        )
        .with_row(db.Row("Load"))
        .with_panel(
            timeseries_panel(
                "Concurrency per pod",
                "Requests each engine decodes at once. Speculation pays below the crossover.",
                [Query(f"{q.VLLM_RUNNING}{{{SELECTOR}}}", "{{pod}}")],
                unit="short",
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Queue and KV cache",
                "Waiting requests and KV-cache use; a full cache means preemptions.",
                [
                    Query(f"sum({q.VLLM_WAITING}{{{SELECTOR}}})", "waiting requests"),
                    Query(f"max({q.VLLM_KV_CACHE_USAGE}{{{SELECTOR}}})", "max KV cache use"),
                ],
                unit="short",
                minimum=0,
            )
        )
        .with_row(db.Row("Acceptance"))
        .with_panel(
            timeseries_panel(
                "Mean acceptance length",
                "1 + accepted tokens per draft, between 1 and k + 1.",
                [Query(acceptance, "acceptance length")],
                unit="none",
                minimum=1,
            )
        )
        .with_panel(
            timeseries_panel(
                "Acceptance per draft position",
                "Fraction of drafts whose i-th token was accepted. It falls with the position.",
                [Query(q.per_position_acceptance(SELECTOR, RATE), "position {{position}}")],
                unit="percentunit",
                minimum=0,
            )
        )
        .with_row(db.Row("Latency and throughput"))
        .with_panel(
            timeseries_panel(
                "Time per output token",
                "Per-request TPOT quantiles (vLLM's request_time_per_output_token).",
                _quantiles(q.VLLM_TPOT),
                unit="s",
                width=8,
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Inter-token latency",
                "Gaps between streamed tokens; with speculation one step emits several.",
                _quantiles(q.VLLM_ITL),
                unit="s",
                width=8,
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Output throughput",
                "Generated tokens per second over all pods.",
                [Query(q.rate_sum(q.VLLM_GENERATION_TOKENS, SELECTOR, RATE), "tokens/s")],
                unit="suffix: tok/s",
                width=8,
                minimum=0,
            )
        )
    )
