"""A vLLM metric page with known contents, built the way vLLM builds it (prometheus-client).

Every metric of :data:`specops.vllm.ENGINE_METRICS` (the pinned release's names, label
names and buckets) is registered; the engine's state is set directly, so every estimate
has a known true value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specops.observation import parse_exposition
from specops.vllm import ENGINE_METRICS, FINISH_REASONS, bucket_bounds

_KINDS: dict[str, Any] = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}


class FakeVllm:
    """One vLLM server with ``engines`` engines (data-parallel ranks) and ``k`` draft positions."""

    def __init__(
        self,
        k: int = 3,
        engines: int = 1,
        model: str = "meta-llama/Llama-3.1-8B",
        kv_blocks: int = 25_000,
    ) -> None:
        self.registry = CollectorRegistry()
        self.k = k
        self.metrics: dict[str, Any] = {}
        for spec in ENGINE_METRICS.values():
            extra = (
                {"buckets": bucket_bounds(spec.buckets, 8192)} if spec.buckets is not None else {}
            )
            self.metrics[spec.name] = _KINDS[spec.kind](
                spec.name, spec.documentation, list(spec.labels), registry=self.registry, **extra
            )
        self._engines = [(model, str(e)) for e in range(engines)]
        for lv in self._engines:
            for spec in ENGINE_METRICS.values():
                metric = self.metrics[spec.name]
                if spec.name == "vllm:cache_config_info":
                    # Set once the engine has sized its pool: the fields read, the rest "None".
                    info = {label: "None" for label in spec.labels}
                    info.update(block_size="16", num_gpu_blocks=str(kv_blocks), engine=lv[1])
                    metric.labels(**info).set(1)
                elif "position" in spec.labels:
                    for pos in range(k):
                        metric.labels(*lv, str(pos))
                elif "finished_reason" in spec.labels:
                    for reason in FINISH_REASONS:
                        metric.labels(*lv, reason)
                else:
                    metric.labels(*lv)

    def _m(self, name: str, engine: int, *extra: str) -> Any:
        return self.metrics[name].labels(*self._engines[engine], *extra)

    def draft(self, drafts: int, accepted_per_position: Sequence[int], engine: int = 0) -> None:
        """Record ``drafts`` drafts of k tokens and how many were accepted at each position."""
        accepted = sum(accepted_per_position)
        self._m("vllm:spec_decode_num_drafts", engine).inc(drafts)
        self._m("vllm:spec_decode_num_draft_tokens", engine).inc(drafts * self.k)
        self._m("vllm:spec_decode_num_accepted_tokens", engine).inc(accepted)
        self._m("vllm:generation_tokens", engine).inc(drafts + accepted)
        for pos, count in enumerate(accepted_per_position):
            self._m("vllm:spec_decode_num_accepted_tokens_per_pos", engine, str(pos)).inc(count)

    def steps(self, emitted_per_step: Iterable[float], engine: int = 0) -> None:
        """Record engine steps, each with the tokens it emitted (prompt + generated)."""
        hist = self._m("vllm:iteration_tokens_total", engine)
        for tokens in emitted_per_step:
            hist.observe(tokens)

    def load(self, running: float, waiting: float = 0, kv: float = 0.0, engine: int = 0) -> None:
        self._m("vllm:num_requests_running", engine).set(running)
        self._m("vllm:num_requests_waiting", engine).set(waiting)
        self._m("vllm:kv_cache_usage_perc", engine).set(kv)

    def preempt(self, count: int, engine: int = 0) -> None:
        self._m("vllm:num_preemptions", engine).inc(count)

    def finish(self, count: int, engine: int = 0) -> None:
        self._m("vllm:request_success", engine, "stop").inc(count)

    def latencies(self, tpot: Iterable[float], itl: Iterable[float], engine: int = 0) -> None:
        for value in tpot:
            self._m("vllm:request_time_per_output_token_seconds", engine).observe(value)
        for value in itl:
            self._m("vllm:inter_token_latency_seconds", engine).observe(value)

    def page(self) -> str:
        return generate_latest(self.registry).decode()


def matrix_from_pages(
    *scrapes: tuple[float, str], instance: str = "10.0.0.7:8000", pod: str = "p-0"
) -> dict[str, Any]:
    """What Prometheus answers for the pages it scraped from one target at the given times."""
    target = {"job": "vllm", "instance": instance, "namespace": "ns", "pod": pod}
    values: dict[tuple[tuple[str, str], ...], list[list[object]]] = {}
    for timestamp, page in scrapes:
        for s in parse_exposition(page, timestamp).series:
            key = tuple(sorted({"__name__": s.name, **s.labels, **target}.items()))
            values.setdefault(key, []).append([timestamp, repr(s.value)])
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": dict(key), "values": v} for key, v in values.items()],
        },
    }
