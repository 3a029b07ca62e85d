"""PromQL for the numbers specops shows and alerts on, written once.

The dashboards call these with Grafana variables in the selector, the alert rules with an
empty selector and ``by=("namespace", "service")``; both then compute the same quantity.

Label contract: every series of a specops-managed pod carries ``namespace``, ``service``
(the SpeculativeService) and ``pod``. vLLM series get them from the scrape (the PodMonitor
relabels the pod's ``specops.io/service`` label), sidecar series carry them themselves.
"""

from __future__ import annotations

from collections.abc import Sequence

from specops import render

__all__ = [
    "OPERATOR_CROSSOVER",
    "OPERATOR_CROSSOVER_BAND",
    "OPERATOR_DECISIONS",
    "OPERATOR_JOB",
    "OPERATOR_MODE",
    "OPERATOR_PREDICTED_GAIN",
    "OPERATOR_PRIOR_CROSSOVER",
    "OPERATOR_RECONCILES",
    "OPERATOR_RECONFIGURATIONS",
    "OPERATOR_ROLLBACKS",
    "OPERATOR_SPECULATIVE_TOKENS",
    "OPERATOR_STEP_TIME_INTERVALS",
    "OPERATOR_TPOT_SPREAD",
    "PODS_JOB",
    "SIDECAR_ACCEPTANCE_LENGTH",
    "SIDECAR_CONFIGURED_K",
    "SIDECAR_CROSSOVER",
    "SIDECAR_ESTIMATE_OK",
    "SIDECAR_METRICS_AGE",
    "SIDECAR_PER_POSITION",
    "SIDECAR_PREDICTED_SPEEDUP",
    "SIDECAR_PREDICTED_TPOT",
    "SIDECAR_RECOMMENDED_K",
    "VLLM_ACCEPTED",
    "VLLM_DRAFTS",
    "VLLM_DRAFT_TOKENS",
    "VLLM_GENERATION_TOKENS",
    "VLLM_INFERENCE_TIME",
    "VLLM_ITL",
    "VLLM_KV_CACHE_USAGE",
    "VLLM_PREEMPTIONS",
    "VLLM_PREFIX_HITS",
    "VLLM_PREFIX_QUERIES",
    "VLLM_QUEUE_TIME",
    "VLLM_RUNNING",
    "VLLM_TPOT",
    "VLLM_TTFT",
    "VLLM_WAITING",
    "acceptance_length",
    "by_clause",
    "counted",
    "histogram_mean",
    "histogram_quantile",
    "rate_sum",
    "series",
]

VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_PREFIX_HITS = "vllm:prefix_cache_hits_total"
VLLM_PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
VLLM_TTFT = "vllm:time_to_first_token_seconds"
VLLM_QUEUE_TIME = "vllm:request_queue_time_seconds"
VLLM_INFERENCE_TIME = "vllm:request_inference_time_seconds"
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
VLLM_TPOT = "vllm:request_time_per_output_token_seconds"
VLLM_ITL = "vllm:inter_token_latency_seconds"

# The sidecar's estimates (labels namespace, pod, service; windowed ones also ``window``).
SIDECAR_ACCEPTANCE_LENGTH = "specops_acceptance_length"
SIDECAR_PER_POSITION = "specops_acceptance_per_position_ratio"
SIDECAR_CONFIGURED_K = "specops_configured_k"
SIDECAR_RECOMMENDED_K = "specops_recommended_k"
SIDECAR_PREDICTED_SPEEDUP = "specops_predicted_speedup"
SIDECAR_PREDICTED_TPOT = "specops_predicted_tpot_seconds"
SIDECAR_CROSSOVER = "specops_crossover_concurrency"
SIDECAR_METRICS_AGE = "specops_metrics_age_seconds"
SIDECAR_ESTIMATE_OK = "specops_estimate_ok"

# The operator's control loop (labels namespace and service name the SpeculativeService).
# Decisions by action and reason code, one count per decision.
OPERATOR_DECISIONS = "specops_decisions_total"
# 1 for the mode of the spec (label mode: Auto, Advise, Fixed, Off), 0 for the others.
OPERATOR_MODE = "specops_mode"
# num_speculative_tokens of the config in force (the cap of a per-batch-size table); 0 is off.
OPERATOR_SPECULATIVE_TOKENS = "specops_speculative_tokens"
OPERATOR_PREDICTED_GAIN = "specops_predicted_gain_ratio"
OPERATOR_CROSSOVER = "specops_crossover_batch_size"
OPERATOR_CROSSOVER_BAND = "specops_crossover_batch_size_band"
OPERATOR_PRIOR_CROSSOVER = "specops_prior_crossover_batch_size"
OPERATOR_STEP_TIME_INTERVALS = "specops_step_time_measured_intervals"
# A request's log TPOT spread the policy priced goodput with: term (base, heterogeneity) and
# source (measured from the window's TPOT histogram, or the prior).
OPERATOR_TPOT_SPREAD = "specops_tpot_log_spread"
# The latest canary's gain over the fleet: measured (mean, low, high) and predicted.
OPERATOR_CANARY_GAIN = "specops_canary_gain_ratio"
OPERATOR_RECONFIGURATIONS = "specops_reconfigurations_total"
OPERATOR_ROLLBACKS = "specops_rollbacks_total"
# Reconciliations of SpeculativeServices, by result (ok, error): the operator's own health.
OPERATOR_RECONCILES = "specops_operator_reconciles_total"

# The job labels of what specops scrapes (see specops.render), for its own targets only.
PODS_JOB = render.PODS_JOB
OPERATOR_JOB = render.OPERATOR_JOB


def by_clause(by: Sequence[str]) -> str:
    """``by (a, b) `` for an aggregation, or nothing when ``by`` is empty."""
    return f"by ({', '.join(by)}) " if by else ""


def series(metric: str, selector: str) -> str:
    """``metric{selector}``, or the bare metric name when there is nothing to select on."""
    return f"{metric}{{{selector}}}" if selector else metric


def rate_sum(metric: str, selector: str, window: str, by: Sequence[str] = ()) -> str:
    """Per-second rate of a counter, summed over pods (and engines) within each group."""
    return f"sum {by_clause(by)}(rate({series(metric, selector)}[{window}]))"


def counted(metric: str, selector: str, window: str, by: Sequence[str] = ()) -> str:
    """Events a counter counted over the window, summed within each group.

    ``increase`` alone misses the event that creates a series: the operator's counters are
    born at 1 (the first rollback of a service), and Prometheus never saw them at 0. A
    series absent at the window's start counts its whole value instead, which is exact.
    """
    picked = series(metric, selector)
    born = f"({picked} unless {picked} offset {window})"
    return f"sum {by_clause(by)}({born} or increase({picked}[{window}]))"


def acceptance_length(selector: str, window: str, by: Sequence[str] = ()) -> str:
    """vLLM's mean acceptance length: 1 + accepted tokens per draft (the bonus token included)."""
    accepted = rate_sum(VLLM_ACCEPTED, selector, window, by)
    drafts = rate_sum(VLLM_DRAFTS, selector, window, by)
    return f"1 + {accepted} / {drafts}"


def histogram_quantile(
    quantile: float, metric: str, selector: str, window: str, by: Sequence[str] = ()
) -> str:
    """A quantile of a vLLM latency histogram over all pods of each group."""
    buckets = rate_sum(f"{metric}_bucket", selector, window, ("le", *by))
    return f"histogram_quantile({quantile}, {buckets})"


def histogram_mean(metric: str, selector: str, window: str, by: Sequence[str] = ()) -> str:
    """The mean of a vLLM histogram over the window: rate of its sum over rate of its count."""
    total = rate_sum(f"{metric}_sum", selector, window, by)
    count = rate_sum(f"{metric}_count", selector, window, by)
    return f"{total} / {count}"
