"""The per-service dashboard: does speculation pay at this load, and what did specops do."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from specops.dashboards import _promql as q
from specops.dashboards._panels import (
    FLEET_UID,
    OVERVIEW_UID,
    RATE,
    Query,
    annotation,
    dashboard_link,
    datasource_variable,
    label_variable,
    stat_panel,
    timeseries_panel,
)

__all__ = ["overview"]

SELECTOR = 'namespace="$namespace", service="$service"'
QUANTILES = (0.5, 0.9, 0.99)


def _quantiles(metric: str) -> list[Query]:
    return [
        Query(q.histogram_quantile(quantile, metric, SELECTOR, RATE), f"p{round(quantile * 100)}")
        for quantile in QUANTILES
    ]


def _gauge(metric: str, aggregation: str = "max", extra: str = "") -> str:
    return f"{aggregation}({metric}{{{SELECTOR}{extra}}})"


def overview() -> db.Dashboard:
    """Build the overview dashboard for one SpeculativeService."""
    acceptance = q.acceptance_length(SELECTOR, RATE)
    measured_tpot = q.histogram_mean(q.VLLM_TPOT, SELECTOR, RATE)
    predicted_tpot_off = _gauge(q.SIDECAR_PREDICTED_TPOT, "avg", ', k="0"')
    changes = f'{SELECTOR}, action=~"Reconfigure|Rollback"'
    reconfigurations = f"{q.counted(q.OPERATOR_DECISIONS, changes, '$__interval')} > 0"
    return (
        db.Dashboard("specops / Overview")
        .uid(OVERVIEW_UID)
        .description("One SpeculativeService: speculation, load, acceptance, latency, throughput.")
        .tags(["specops", "vllm", "speculative-decoding"])
        .editable()
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .link(
            dashboard_link(
                "Fleet", FLEET_UID, "Every SpeculativeService side by side, and what specops did"
            )
        )
        .annotation(annotation("Reconfigurations", reconfigurations, "orange"))
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
                "Mode",
                "The SpeculativeService's mode: Auto applies the controller's decisions, "
                "Advise only recommends, Fixed and Off never change the config.",
                Query(f"max by (mode) ({q.series(q.OPERATOR_MODE, SELECTOR)} == 1)", "{{mode}}"),
                width=3,
                name_only=True,
            )
        )
        .with_panel(
            stat_panel(
                "Draft positions (k)",
                "num_speculative_tokens the engines run now, as they report it; 0 is off.",
                Query(_gauge(q.SIDECAR_CONFIGURED_K), "k"),
                width=3,
            )
        )
        .with_panel(
            stat_panel(
                "Recommended k",
                "What the measured acceptance and load call for now (0: off).",
                Query(_gauge(q.SIDECAR_RECOMMENDED_K), "recommended k"),
                width=3,
            )
        )
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
        .with_panel(
            stat_panel(
                "Best predicted speedup",
                "Throughput over no speculation for the best k, predicted at this load.",
                Query(_gauge(q.SIDECAR_PREDICTED_SPEEDUP), "speedup"),
                unit="x",
                decimals=2,
            )
        )
        .with_panel(
            stat_panel(
                "Step-time intervals measured",
                "Measured intervals the controller's step-time model has learned from; "
                "0 means it still predicts from the performance profile alone.",
                Query(_gauge(q.OPERATOR_STEP_TIME_INTERVALS), "intervals"),
                width=3,
                decimals=0,
            )
        )
        .with_panel(
            stat_panel(
                "Metrics age",
                "Age of the newest engine reading behind the estimates; decisions wait when stale.",
                Query(_gauge(q.SIDECAR_METRICS_AGE), "age"),
                unit="s",
                width=3,
                decimals=0,
            )
        )
        .with_row(db.Row("Load"))
        .with_panel(
            timeseries_panel(
                "Concurrency against the measured crossover",
                "Requests each engine decodes at once, and for each k the batch size from "
                "which it stops paying. Speculation with k pays below its crossover.",
                [
                    Query(f"{q.VLLM_RUNNING}{{{SELECTOR}}}", "running {{pod}}"),
                    Query(f"min by (k) ({q.SIDECAR_CROSSOVER}{{{SELECTOR}}})", "crossover k={{k}}"),
                ],
                unit="short",
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Canary: measured gain beside the prediction",
                "With two or more replicas a change runs on one pod first: its speedup over "
                "the rest of the fleet on the same traffic (time per output token), measured "
                "with its interval, and what the step-time model predicted for it.",
                [
                    Query(
                        f"max by (quantity) ({q.OPERATOR_CANARY_GAIN}{{{SELECTOR}}})",
                        "{{quantity}}",
                    )
                ],
                unit="percentunit",
            )
        )
        .with_panel(
            timeseries_panel(
                "Crossover: learned from measurements against the prior",
                "For each candidate k, the batch size from which it stops paying as the "
                "controller predicts it from measured step times (with its 10th-90th "
                "percentile band), and as the performance profile alone predicts it.",
                [
                    Query(f"min by (k) ({q.OPERATOR_CROSSOVER}{{{SELECTOR}}})", "learned k={{k}}"),
                    Query(
                        f"min by (k, quantile) ({q.OPERATOR_CROSSOVER_BAND}{{{SELECTOR}}})",
                        "learned k={{k}} q{{quantile}}",
                    ),
                    Query(
                        f"min by (k) ({q.OPERATOR_PRIOR_CROSSOVER}{{{SELECTOR}}})",
                        "prior k={{k}}",
                    ),
                ],
                unit="short",
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Per-request TPOT spread: measured or the prior",
                "How far one request's time per output token strays from its config's mean "
                "(log standard deviation), which decides the share of tokens within a TPOT "
                "target: the base spread, and the requests' acceptance heterogeneity that k "
                "multiplies. Measured from each window's request TPOT histogram; the prior "
                "where a window measured none.",
                [
                    Query(
                        f"max by (term, source) ({q.OPERATOR_TPOT_SPREAD}{{{SELECTOR}}})",
                        "{{term}} ({{source}})",
                    )
                ],
                unit="short",
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Queue, KV cache and preemptions",
                "Waiting requests, KV-cache use and preemptions per second: a full cache "
                "preempts, and a longer k reserves more of it; reconfigurations are marked.",
                [
                    Query(f"sum({q.VLLM_WAITING}{{{SELECTOR}}})", "waiting requests"),
                    Query(f"max({q.VLLM_KV_CACHE_USAGE}{{{SELECTOR}}})", "max KV cache use"),
                    Query(q.rate_sum(q.VLLM_PREEMPTIONS, SELECTOR, RATE), "preemptions/s"),
                ],
                unit="short",
                minimum=0,
            )
        )
        .with_row(db.Row("Acceptance"))
        .with_panel(
            timeseries_panel(
                "Mean acceptance length",
                "1 + accepted tokens per draft, between 1 and k + 1: from the engine's "
                "counters, and the sidecar's windowed estimate the controller uses.",
                [
                    Query(acceptance, "engine counters"),
                    Query(
                        f"avg by (window) ({q.SIDECAR_ACCEPTANCE_LENGTH}{{{SELECTOR}}})",
                        "sidecar, {{window}} window",
                    ),
                ],
                unit="none",
                minimum=1,
            )
        )
        .with_panel(
            timeseries_panel(
                "Acceptance per draft position",
                "Fraction of drafts whose i-th token was accepted, over the drafts that "
                "proposed one there: the sidecar's estimate over each of its windows, "
                "corrected for the drafts a per-batch-size table cuts short. It falls with the "
                "position.",
                [
                    Query(
                        f"avg by (position, window) ({q.SIDECAR_PER_POSITION}{{{SELECTOR}}})",
                        "position {{position}}, {{window}} window",
                    )
                ],
                unit="percentunit",
                minimum=0,
            )
        )
        .with_row(db.Row("What the engines ran"))
        .with_panel(
            timeseries_panel(
                "k the engines ran against the k configured",
                "Drafted tokens per draft (num_draft_tokens / num_drafts): the k a step really "
                "drafted on average, below the configured k where a per-batch-size table "
                "drafts less at large batches.",
                [
                    Query(
                        f"{q.rate_sum(q.VLLM_DRAFT_TOKENS, SELECTOR, RATE)} / "
                        f"{q.rate_sum(q.VLLM_DRAFTS, SELECTOR, RATE)}",
                        "k ran",
                    ),
                    Query(_gauge(q.SIDECAR_CONFIGURED_K), "k configured"),
                ],
                unit="short",
                width=8,
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Acceptance rate",
                "Accepted over drafted tokens, vLLM's own acceptance rate (not the per-token "
                "alpha): it falls as k grows even when every position's acceptance holds.",
                [
                    Query(
                        f"{q.rate_sum(q.VLLM_ACCEPTED, SELECTOR, RATE)} / "
                        f"{q.rate_sum(q.VLLM_DRAFT_TOKENS, SELECTOR, RATE)}",
                        "accepted / drafted",
                    )
                ],
                unit="percentunit",
                width=8,
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Draft tokens accepted and rejected",
                "Tokens per second the drafts contributed to the output, and those the target "
                "rejected: compute spent for nothing.",
                [
                    Query(q.rate_sum(q.VLLM_ACCEPTED, SELECTOR, RATE), "accepted"),
                    Query(
                        f"{q.rate_sum(q.VLLM_DRAFT_TOKENS, SELECTOR, RATE)} - "
                        f"{q.rate_sum(q.VLLM_ACCEPTED, SELECTOR, RATE)}",
                        "rejected",
                    ),
                ],
                unit="suffix: tok/s",
                width=8,
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Acceptance length per pod",
                "1 + accepted tokens per draft, each pod on its own: one pod far from the "
                "others serves other traffic, or runs another draft.",
                [Query(q.acceptance_length(SELECTOR, RATE, ("pod",)), "{{pod}}")],
                unit="none",
                minimum=1,
            )
        )
        .with_panel(
            timeseries_panel(
                "Running requests per pod",
                "Each engine's batch: the load the controller sets against the crossover.",
                [Query(f"sum by (pod) ({q.VLLM_RUNNING}{{{SELECTOR}}})", "{{pod}}")],
                unit="short",
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
        .with_panel(
            timeseries_panel(
                "Time to first token",
                "Per-request TTFT quantiles: queueing and prefill, which drafting does not "
                "speed up.",
                _quantiles(q.VLLM_TTFT),
                unit="s",
                width=8,
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "End-to-end latency",
                "Mean seconds from arrival to the last token: time queued plus time running.",
                [
                    Query(
                        f"({q.rate_sum(f'{q.VLLM_QUEUE_TIME}_sum', SELECTOR, RATE)} + "
                        f"{q.rate_sum(f'{q.VLLM_INFERENCE_TIME}_sum', SELECTOR, RATE)}) / "
                        f"{q.rate_sum(f'{q.VLLM_INFERENCE_TIME}_count', SELECTOR, RATE)}",
                        "mean",
                    )
                ],
                unit="s",
                width=8,
                minimum=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Prefix-cache hit rate",
                "Share of prompt tokens served from the prefix cache: prefill work saved, which "
                "shortens TTFT and leaves more of each step to decoding.",
                [
                    Query(
                        f"{q.rate_sum(q.VLLM_PREFIX_HITS, SELECTOR, RATE)} / "
                        f"{q.rate_sum(q.VLLM_PREFIX_QUERIES, SELECTOR, RATE)}",
                        "hit rate",
                    )
                ],
                unit="percentunit",
                width=8,
                minimum=0,
            )
        )
        .with_row(db.Row("Prediction against measurement"))
        .with_panel(
            timeseries_panel(
                "Predicted against measured speedup",
                "Predicted: throughput over k = 0 at the observed load, per k. Measured: the "
                "predicted TPOT without speculation over the measured mean TPOT.",
                [
                    Query(
                        f"avg by (k) ({q.SIDECAR_PREDICTED_SPEEDUP}{{{SELECTOR}}})",
                        "predicted k={{k}}",
                    ),
                    Query(f"{predicted_tpot_off} / ({measured_tpot})", "measured"),
                ],
                unit="x",
            )
        )
        .with_panel(
            timeseries_panel(
                "k over time",
                "The k the controller holds in force, the k the engines run (behind it during "
                "a rollout) and the k the measurements recommend; reconfigurations are marked.",
                [
                    Query(_gauge(q.OPERATOR_SPECULATIVE_TOKENS), "k in force"),
                    Query(_gauge(q.SIDECAR_CONFIGURED_K), "running k"),
                    Query(_gauge(q.SIDECAR_RECOMMENDED_K), "recommended k"),
                ],
                unit="short",
                minimum=0,
            )
        )
    )
