"""The vLLM 0.33.0 metrics specops exports (simulated engine) and reads (sidecar, dashboards).

Names, types, label names and histogram buckets as ``vllm/v1/metrics/loggers.py``,
``vllm/v1/metrics/perf.py``, ``vllm/v1/spec_decode/metrics.py`` and
``vllm/v1/metrics/buckets.py`` define them in the wheel; the conformance tests compare
every entry here with that source. Counter names are the registered names:
prometheus-client adds ``_total`` on the page. :data:`ENGINE_METRICS` are those specops
reads; :data:`OTHER_METRICS` the rest of what vLLM always registers, which the simulated
engine exports too; :data:`RELEASE_METRICS` both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CACHE_CONFIG_FIELDS",
    "ENGINE_LABELS",
    "ENGINE_METRICS",
    "FINISH_REASONS",
    "INTER_TOKEN_LATENCY_BUCKETS",
    "ITERATION_TOKENS_BUCKETS",
    "OTHER_METRICS",
    "RELEASE_METRICS",
    "REQUEST_LATENCY_BUCKETS",
    "REQUEST_NUM_PREEMPTIONS_BUCKETS",
    "REQUEST_PARAMS_N_BUCKETS",
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
REQUEST_PARAMS_N_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20)
REQUEST_NUM_PREEMPTIONS_BUCKETS: tuple[float, ...] = (1, 2, 3, 4, 5, 10, 20)


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
    ``request_tokens`` depends on max_model_len. ``label_values``: the values of the last
    label, for a family vLLM creates a child of per value when it starts.
    """

    name: str
    kind: MetricKind
    documentation: str
    labels: tuple[str, ...] = ENGINE_LABELS
    buckets: str | None = None
    label_values: tuple[str, ...] = ()


# vllm/config/cache.py CacheConfig's fields in declaration order, then the engine's index:
# the labels of vllm:cache_config_info, whose one child per engine (value 1) carries the
# config (CacheConfig.metrics_info() is its __dict__ as strings, and log_metrics_info adds
# "engine"). specops reads num_gpu_blocks and block_size, the pool the usage is a share of.
CACHE_CONFIG_FIELDS: tuple[str, ...] = (
    "block_size", "user_specified_block_size", "kv_cache_layout", "prefix_match_unit",
    "gpu_memory_utilization", "cache_dtype", "is_attention_free", "num_gpu_blocks_override",
    "sliding_window", "enable_prefix_caching", "prefix_caching_hash_algo",
    "prefix_cache_retention_interval", "kv_cache_dtype_skip_layers", "mamba_page_size_padded",
    "skip_page_size_padded", "mamba_block_size", "mamba_cache_dtype", "mamba_ssm_cache_dtype",
    "mamba_cache_mode", "enable_mamba_shared_prefix_checkpoint", "replayssm_buffer_len",
    "use_replayssm", "use_kda_recoverssm", "num_gpu_blocks", "num_cpu_blocks",
    "simple_cpu_offload_num_blocks", "effective_attention_block_size", "kv_cache_size_tokens",
    "kv_cache_max_concurrency", "hash_block_size", "cache_hit_alignment_tokens",
    "kv_sharing_fast_prefill", "swa_bounded_replay", "kv_cache_memory_bytes",
    "kv_offloading_size", "kv_offloading_backend", "_block_size_resolved",
)  # fmt: skip

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
            "vllm:cache_config_info",
            "gauge",
            "Information of the LLMEngine CacheConfig",
            labels=(*CACHE_CONFIG_FIELDS, "engine"),
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
            label_values=FINISH_REASONS,
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
        MetricSpec(
            "vllm:prefix_cache_queries",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
        ),
        MetricSpec(
            "vllm:prefix_cache_hits",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
        ),
    )
}

_C: MetricKind = "counter"
OTHER_METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec(
            "vllm:num_requests_waiting_by_reason",
            "gauge",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
            "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            labels=(*ENGINE_LABELS, "reason"),
            label_values=("capacity", "deferred"),
        ),
        MetricSpec(
            "vllm:engine_sleep_state",
            "gauge",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
            "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
            "level 2.",
            labels=(*ENGINE_LABELS, "sleep_state"),
            label_values=("awake", "weights_offloaded", "discard_all"),
        ),
        MetricSpec(
            "vllm:external_prefix_cache_queries",
            _C,
            "External prefix cache queries from KV connector cross-instance cache sharing, in "
            "terms of number of queried tokens.",
        ),
        MetricSpec(
            "vllm:external_prefix_cache_hits",
            _C,
            "External prefix cache hits from KV connector cross-instance cache sharing, in "
            "terms of number of cached tokens.",
        ),
        MetricSpec(
            "vllm:mm_cache_queries",
            _C,
            "Multi-modal cache queries, in terms of number of queried items.",
        ),
        MetricSpec(
            "vllm:mm_cache_hits", _C, "Multi-modal cache hits, in terms of number of cached items."
        ),
        MetricSpec(
            "vllm:prompt_tokens_by_source",
            _C,
            "Number of prompt tokens by source.",
            labels=(*ENGINE_LABELS, "source"),
            label_values=("local_compute", "local_cache_hit", "external_kv_transfer"),
        ),
        MetricSpec(
            "vllm:prompt_tokens_cached",
            _C,
            "Number of cached prompt tokens (local + external).",
        ),
        MetricSpec(
            "vllm:prompt_tokens_cached_by_source",
            _C,
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.",
            labels=(*ENGINE_LABELS, "source"),
            label_values=("device", "host", "p2p", "disk", "external_unspecified"),
        ),
        MetricSpec(
            "vllm:admission_rejections",
            _C,
            "Number of admission attempts rejected by a queue limit, by reason.",
            labels=("model_name", "reason"),
            label_values=("max_num_queued_reqs", "max_num_queued_tokens"),
        ),
        MetricSpec(
            "vllm:request_max_num_generation_tokens",
            _H,
            "Histogram of maximum number of requested generation tokens.",
            buckets="request_tokens",
        ),
        MetricSpec(
            "vllm:request_params_n",
            _H,
            "Histogram of the n request parameter.",
            buckets="request_params_n",
        ),
        MetricSpec(
            "vllm:request_params_max_tokens",
            _H,
            "Histogram of the max_tokens request parameter.",
            buckets="request_tokens",
        ),
        MetricSpec(
            "vllm:request_num_preemptions",
            _H,
            "Histogram of the number of times a request was preempted.",
            buckets="request_num_preemptions",
        ),
        MetricSpec(
            "vllm:request_prefill_kv_computed_tokens",
            _H,
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            buckets="request_tokens",
        ),
        MetricSpec(
            "vllm:estimated_flops_per_gpu_total",
            _C,
            "Estimated number of floating point operations per GPU (for Model Flops "
            "Utilization calculations).",
        ),
        MetricSpec(
            "vllm:estimated_read_bytes_per_gpu_total",
            _C,
            "Estimated number of bytes read from memory per GPU (for Model Flops Utilization "
            "calculations).",
        ),
        MetricSpec(
            "vllm:estimated_write_bytes_per_gpu_total",
            _C,
            "Estimated number of bytes written to memory per GPU (for Model Flops Utilization "
            "calculations).",
        ),
    )
}
RELEASE_METRICS: dict[str, MetricSpec] = {**ENGINE_METRICS, **OTHER_METRICS}

_STATIC_BUCKETS: dict[str, tuple[float, ...]] = {
    "request_latency": REQUEST_LATENCY_BUCKETS,
    "time_to_first_token": TIME_TO_FIRST_TOKEN_BUCKETS,
    "inter_token_latency": INTER_TOKEN_LATENCY_BUCKETS,
    "iteration_tokens": ITERATION_TOKENS_BUCKETS,
    "request_params_n": REQUEST_PARAMS_N_BUCKETS,
    "request_num_preemptions": REQUEST_NUM_PREEMPTIONS_BUCKETS,
}


def bucket_bounds(family: str, max_model_len: int) -> tuple[float, ...]:
    """The bucket upper bounds (no +Inf) of a bucket family."""
    if family == "request_tokens":
        return request_tokens_buckets(max_model_len)
    return _STATIC_BUCKETS[family]
