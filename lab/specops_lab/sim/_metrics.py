"""The engine's metric accumulators, kept as vLLM defines them but without prometheus-client.

The core counts in plain integers and bucket arrays (fast enough to observe a whole batch
per step); the HTTP shell turns a snapshot into vLLM's exposition with prometheus-client.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specops.vllm import CACHE_CONFIG_FIELDS, RELEASE_METRICS, bucket_bounds

__all__ = [
    "EngineMetrics",
    "HistogramSnapshot",
    "MetricsRecorder",
]


@dataclass(frozen=True)
class HistogramSnapshot:
    """Upper bounds (no +Inf), cumulative counts per bound then +Inf, and the sum."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    total: float

    @property
    def count(self) -> int:
        return self.cumulative[-1]


@dataclass(frozen=True)
class EngineMetrics:
    """A consistent reading of every metric, keyed by vLLM's registered names."""

    counters: Mapping[str, int]
    accepted_per_position: tuple[int, ...]
    labelled: Mapping[str, Mapping[str, float]]
    """Families with one child per value of a last label (MetricSpec.label_values)."""
    gauges: Mapping[str, float]
    histograms: Mapping[str, HistogramSnapshot]
    cache_config: Mapping[str, str]
    """vllm:cache_config_info's labels but the engine's: the KV pool as the engine sized it."""

    @property
    def success(self) -> Mapping[str, float]:
        """vllm:request_success by finished_reason."""
        return self.labelled["vllm:request_success"]

    @property
    def mean_acceptance_length(self) -> float:
        """vLLM's 1 + accepted / drafts (nan before the first draft)."""
        drafts = self.counters["vllm:spec_decode_num_drafts"]
        if drafts == 0:
            return float("nan")
        return 1.0 + self.counters["vllm:spec_decode_num_accepted_tokens"] / drafts


CACHE_CONFIG_INFO = "vllm:cache_config_info"
# vLLM 0.33.0's CacheConfig defaults as metrics_info() writes them (each value's str), for a
# model with full attention, prefix caching and no offload; the engine sets the pool it sizes.
_CACHE_CONFIG_DEFAULTS: dict[str, str] = {
    "block_size": "16", "user_specified_block_size": "False", "kv_cache_layout": "None",
    "prefix_match_unit": "None", "gpu_memory_utilization": "0.92", "cache_dtype": "auto",
    "is_attention_free": "False", "num_gpu_blocks_override": "None", "sliding_window": "None",
    "enable_prefix_caching": "True", "prefix_caching_hash_algo": "sha256",
    "prefix_cache_retention_interval": "0", "kv_cache_dtype_skip_layers": "[]",
    "mamba_page_size_padded": "None", "skip_page_size_padded": "None",
    "mamba_block_size": "None", "mamba_cache_dtype": "auto", "mamba_ssm_cache_dtype": "auto",
    "mamba_cache_mode": "none", "enable_mamba_shared_prefix_checkpoint": "False",
    "replayssm_buffer_len": "16", "use_replayssm": "False", "use_kda_recoverssm": "False",
    "num_gpu_blocks": "None", "num_cpu_blocks": "None", "simple_cpu_offload_num_blocks": "None",
    "effective_attention_block_size": "None", "kv_cache_size_tokens": "None",
    "kv_cache_max_concurrency": "None", "hash_block_size": "None",
    "cache_hit_alignment_tokens": "None", "kv_sharing_fast_prefill": "False",
    "swa_bounded_replay": "True", "kv_cache_memory_bytes": "None", "kv_offloading_size": "None",
    "kv_offloading_backend": "native", "_block_size_resolved": "True",
}  # fmt: skip
if tuple(_CACHE_CONFIG_DEFAULTS) != CACHE_CONFIG_FIELDS:
    raise RuntimeError("the simulated CacheConfig's fields differ from vLLM's")

# Up to this many values, observing them one by one is cheaper than with numpy.
_FEW = 8


class _Histogram:
    __slots__ = ("bounds", "counts", "edges", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.edges = np.asarray(bounds, dtype=np.float64)
        self.counts: npt.NDArray[np.int64] = np.zeros(len(bounds) + 1, dtype=np.int64)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def observe_each(self, values: npt.NDArray[np.float64]) -> None:
        """Observe every value in order, the sum added up one value after another (as
        ``observe`` adds them: the same total to the last bit); a few, one by one, as numpy
        calls cost more than they save on so few."""
        if values.size <= _FEW:
            for value in values.tolist():
                self.observe(value)
        else:
            index = np.searchsorted(self.edges, values, side="left")
            self.counts += np.bincount(index, minlength=self.counts.size)
            self.total = float(np.cumsum(np.concatenate(([self.total], values)))[-1])

    def observe_many(
        self, values: npt.NDArray[np.float64], times: npt.NDArray[np.int64] | None = None
    ) -> None:
        """Observe every value, each ``times[i]`` times when given (a stretch's steps)."""
        if values.size:
            index = np.searchsorted(self.edges, values, side="left")
            self.counts += np.bincount(index, times, minlength=self.counts.size).astype(np.int64)
            self.total += float(values.sum() if times is None else values @ times)

    def snapshot(self) -> HistogramSnapshot:
        cumulative = tuple(int(c) for c in np.cumsum(self.counts))
        return HistogramSnapshot(self.bounds, cumulative, self.total)


class MetricsRecorder:
    """Mutable accumulators owned by one engine; ``snapshot`` gives an immutable copy."""

    def __init__(self, max_model_len: int) -> None:
        plain = {
            name: spec
            for name, spec in RELEASE_METRICS.items()
            if not spec.label_values
            and name not in ("vllm:spec_decode_num_accepted_tokens_per_pos", CACHE_CONFIG_INFO)
        }
        self.counters: dict[str, int] = {
            name: 0 for name, spec in plain.items() if spec.kind == "counter"
        }
        self.accepted_per_position: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.num_positions = 0
        self.labelled: dict[str, dict[str, float]] = {
            name: dict.fromkeys(spec.label_values, 0.0)
            for name, spec in RELEASE_METRICS.items()
            if spec.label_values
        }
        self.gauges: dict[str, float] = {
            name: 0.0 for name, spec in plain.items() if spec.kind == "gauge"
        }
        self.histograms: dict[str, _Histogram] = {
            name: _Histogram(bucket_bounds(spec.buckets or "", max_model_len))
            for name, spec in plain.items()
            if spec.kind == "histogram"
        }
        self.labelled["vllm:engine_sleep_state"]["awake"] = 1.0
        self.cache_config = dict(_CACHE_CONFIG_DEFAULTS)

    def set_kv_pool(self, block_size: int, blocks: int, max_model_len: int) -> None:
        """Describe the KV pool as vLLM does once it has sized it (cache_config_info)."""
        self.cache_config.update(
            block_size=str(block_size),
            num_gpu_blocks=str(blocks),
            effective_attention_block_size=str(block_size),
            kv_cache_size_tokens=str(blocks * block_size),
            kv_cache_max_concurrency=str(blocks * block_size / max_model_len),
        )

    def set_positions(self, positions: int) -> None:
        """Export ``positions`` per-position counters (vLLM: num_speculative_tokens)."""
        if positions > self.accepted_per_position.size:
            grown = np.zeros(positions, dtype=np.int64)
            grown[: self.accepted_per_position.size] = self.accepted_per_position
            self.accepted_per_position = grown
        self.num_positions = positions

    def snapshot(self) -> EngineMetrics:
        return EngineMetrics(
            counters=dict(self.counters),
            accepted_per_position=tuple(
                int(c) for c in self.accepted_per_position[: self.num_positions]
            ),
            labelled={name: dict(values) for name, values in self.labelled.items()},
            gauges=dict(self.gauges),
            histograms={name: h.snapshot() for name, h in self.histograms.items()},
            cache_config=dict(self.cache_config),
        )
