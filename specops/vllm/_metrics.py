"""The vLLM 0.33.0 metrics specops exports (simulated engine) and reads (sidecar, dashboards).

Names, types, label names and histogram buckets as ``vllm/v1/metrics/loggers.py``,
``vllm/v1/spec_decode/metrics.py`` and ``vllm/v1/metrics/buckets.py`` define them in
the wheel; the conformance tests compare every entry here with that source. Counter
names are the registered names: prometheus-client adds ``_total`` on the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ENGINE_LABELS",
    "ENGINE_METRICS",
    "FINISH_REASONS",
    "INTER_TOKEN_LATENCY_BUCKETS",
    "ITERATION_TOKENS_BUCKETS",
    "REQUEST_LATENCY_BUCKETS",
    "TIME_TO_FIRST_TOKEN_BUCKETS",
    "MetricKind",
    "MetricSpec",
    "bucket_bounds",
    "request_tokens_buckets",
]

MetricKind = Literal["counter", "gauge", "histogram"]

ENGINE_LABELS: tuple[str, ...] = ("model_name", "engine")
# vllm/v1/engine/__init__.py FINISH_REASON_STRINGS: request_success's finished_reason values.
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")

REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
TIME_TO_FIRST_TOKEN_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
INTER_TOKEN_LATENCY_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
)  # fmt: skip


def request_tokens_buckets(max_model_len: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 series capped at max_model_len (``build_1_2_5_buckets``)."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(buckets)
            buckets.append(value)
        exponent += 1


@dataclass(frozen=True)
class MetricSpec:
    """One vLLM metric: registered name, type, label names, documentation, buckets.

    ``buckets`` names a bucket family of vllm/v1/metrics/buckets.py for histograms;
    ``request_tokens`` depends on max_model_len.
    """

    name: str
    kind: MetricKind
    documentation: str
    labels: tuple[str, ...] = ENGINE_LABELS
    buckets: str | None = None


_H: MetricKind = "histogram"
ENGINE_METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec(
            "vllm:num_requests_running", "gauge", "Number of requests in model execution batches."
        ),
        MetricSpec(
            "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."
        ),
        MetricSpec(
            "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."
        ),
        MetricSpec(
            "vllm:num_preemptions", "counter", "Cumulative number of preemption from the engine."
        ),
        MetricSpec("vllm:prompt_tokens", "counter", "Number of prefill tokens processed."),
        MetricSpec("vllm:generation_tokens", "counter", "Number of generation tokens processed."),
        MetricSpec(
            "vllm:request_success",
            "counter",
            "Count of successfully processed requests.",
            labels=(*ENGINE_LABELS, "finished_reason"),
        ),
        MetricSpec("vllm:spec_decode_num_drafts", "counter", "Number of spec decoding drafts."),
        MetricSpec("vllm:spec_decode_num_draft_tokens", "counter", "Number of draft tokens."),
        MetricSpec("vllm:spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens."),
        MetricSpec(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "counter",
            "Accepted tokens per draft position.",
            labels=(*ENGINE_LABELS, "position"),
        ),
        MetricSpec(
            "vllm:iteration_tokens_total",
            _H,
            "Histogram of number of tokens per engine_step.",
            buckets="iteration_tokens",
        ),
        MetricSpec(
            "vllm:request_prompt_tokens",
            _H,
            "Number of prefill tokens processed.",
            buckets="request_tokens",
        ),
        MetricSpec(
            "vllm:request_generation_tokens",
            _H,
            "Number of generation tokens processed.",
            buckets="request_tokens",
        ),
        MetricSpec(
            "vllm:time_to_first_token_seconds",
            _H,
            "Histogram of time to first token in seconds.",
            buckets="time_to_first_token",
        ),
        MetricSpec(
            "vllm:inter_token_latency_seconds",
            _H,
            "Histogram of inter-token latency in seconds.",
            buckets="inter_token_latency",
        ),
        MetricSpec(
            "vllm:request_time_per_output_token_seconds",
            _H,
            "Histogram of time_per_output_token_seconds per request.",
            buckets="inter_token_latency",
        ),
        MetricSpec(
            "vllm:e2e_request_latency_seconds",
            _H,
            "Histogram of e2e request latency in seconds.",
            buckets="request_latency",
        ),
        MetricSpec(
            "vllm:request_queue_time_seconds",
            _H,
            "Histogram of time spent in WAITING phase for request.",
            buckets="request_latency",
        ),
        MetricSpec(
            "vllm:request_inference_time_seconds",
            _H,
            "Histogram of time spent in RUNNING phase for request.",
            buckets="request_latency",
        ),
        MetricSpec(
            "vllm:request_prefill_time_seconds",
            _H,
            "Histogram of time spent in PREFILL phase for request.",
            buckets="request_latency",
        ),
        MetricSpec(
            "vllm:request_decode_time_seconds",
            _H,
            "Histogram of time spent in DECODE phase for request.",
            buckets="request_latency",
        ),
    )
}

_STATIC_BUCKETS: dict[str, tuple[float, ...]] = {
    "request_latency": REQUEST_LATENCY_BUCKETS,
    "time_to_first_token": TIME_TO_FIRST_TOKEN_BUCKETS,
    "inter_token_latency": INTER_TOKEN_LATENCY_BUCKETS,
    "iteration_tokens": ITERATION_TOKENS_BUCKETS,
}


def bucket_bounds(family: str, max_model_len: int) -> tuple[float, ...]:
    """The bucket upper bounds (no +Inf) of a bucket family."""
    if family == "request_tokens":
        return request_tokens_buckets(max_model_len)
    return _STATIC_BUCKETS[family]
