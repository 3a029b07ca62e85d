"""The vLLM series the estimators read, as sample names on the page.

Every name is looked up in :data:`specops.vllm.ENGINE_METRICS` (the pinned release's
metrics) with its kind, so a renamed or retyped metric fails at import, not silently.
Counters get the ``_total`` prometheus-client adds on the page.
"""

from __future__ import annotations

from enum import StrEnum

from specops.vllm import ENGINE_METRICS

__all__ = [
    "ACCEPTED_PER_POSITION",
    "CACHE_CONFIG_INFO",
    "SAMPLE_NAMES",
    "SUMMED_GAUGES",
    "Counter",
    "Gauge",
    "Hist",
]


def _checked(name: str, kind: str) -> str:
    spec = ENGINE_METRICS[name]
    if spec.kind != kind:
        raise TypeError(f"vLLM metric {name} is a {spec.kind}, the estimators read a {kind}")
    return f"{name}_total" if kind == "counter" else name


class Counter(StrEnum):
    """Monotone vLLM counters the estimators use."""

    DRAFTS = _checked("vllm:spec_decode_num_drafts", "counter")
    DRAFT_TOKENS = _checked("vllm:spec_decode_num_draft_tokens", "counter")
    ACCEPTED_TOKENS = _checked("vllm:spec_decode_num_accepted_tokens", "counter")
    GENERATION_TOKENS = _checked("vllm:generation_tokens", "counter")
    PROMPT_TOKENS = _checked("vllm:prompt_tokens", "counter")
    PREEMPTIONS = _checked("vllm:num_preemptions", "counter")
    REQUESTS = _checked("vllm:request_success", "counter")


class Gauge(StrEnum):
    """vLLM gauges the estimators sample once per reading."""

    RUNNING = _checked("vllm:num_requests_running", "gauge")
    WAITING = _checked("vllm:num_requests_waiting", "gauge")
    KV_CACHE_USAGE = _checked("vllm:kv_cache_usage_perc", "gauge")


class Hist(StrEnum):
    """vLLM histograms (base names; the page has ``_bucket``, ``_count`` and ``_sum``)."""

    ITERATION_TOKENS = _checked("vllm:iteration_tokens_total", "histogram")
    TPOT = _checked("vllm:request_time_per_output_token_seconds", "histogram")
    ITL = _checked("vllm:inter_token_latency_seconds", "histogram")
    TTFT = _checked("vllm:time_to_first_token_seconds", "histogram")


ACCEPTED_PER_POSITION = _checked("vllm:spec_decode_num_accepted_tokens_per_pos", "counter")
# One child per engine, value 1, whose labels say how large the engine made its KV pool.
CACHE_CONFIG_INFO = _checked("vllm:cache_config_info", "gauge")
# Gauges that add up over engines; the others (KV-cache usage) are averaged.
SUMMED_GAUGES = frozenset({Gauge.RUNNING, Gauge.WAITING})
SAMPLE_NAMES: frozenset[str] = frozenset(
    [c.value for c in Counter]
    + [g.value for g in Gauge]
    + [f"{h.value}{suffix}" for h in Hist for suffix in ("_bucket", "_count", "_sum")]
    + [ACCEPTED_PER_POSITION, CACHE_CONFIG_INFO]
)
