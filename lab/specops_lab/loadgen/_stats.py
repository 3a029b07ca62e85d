"""Per-request timings and their summary, measured the way vLLM's serving benchmark does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["RequestRecord", "summarize"]

_PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class RequestRecord:
    """One request: ``ttft`` and ``latency`` in seconds, ``itl`` the gaps between chunks."""

    ok: bool
    start: float
    ttft: float
    latency: float
    prompt_tokens: int
    output_tokens: int
    itl: tuple[float, ...]
    error: str = ""

    @property
    def tpot(self) -> float | None:
        """(latency - ttft) / (output tokens - 1); None for one-token outputs."""
        if self.output_tokens <= 1:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


def _distribution(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    data = np.asarray(values, dtype=float) * 1000.0
    summary = {"mean_ms": float(data.mean()), "median_ms": float(np.median(data))}
    summary |= {f"p{p}_ms": float(np.percentile(data, p)) for p in _PERCENTILES}
    return summary


def summarize(records: Sequence[RequestRecord], duration_s: float) -> dict[str, object]:
    """Counts, throughput and TTFT/TPOT/ITL percentiles in milliseconds, as a JSON object;
    ``client_in_flight`` is the requests' time over the wall time (mean requests in flight)."""
    done = [r for r in records if r.ok]
    output = sum(r.output_tokens for r in done)
    return {
        "duration_s": duration_s,
        "completed": len(done),
        "failed": len(records) - len(done),
        "errors": sorted({r.error for r in records if not r.ok})[:10],
        "input_tokens": sum(r.prompt_tokens for r in done),
        "output_tokens": output,
        "client_in_flight": sum(r.latency for r in records) / duration_s if duration_s > 0 else 0.0,
        "request_throughput": len(done) / duration_s if duration_s > 0 else 0.0,
        "output_throughput": output / duration_s if duration_s > 0 else 0.0,
        "ttft": _distribution([r.ttft for r in done]),
        "tpot": _distribution([t for r in done if (t := r.tpot) is not None]),
        "itl": _distribution([gap for r in done for gap in r.itl]),
        "e2el": _distribution([r.latency for r in done]),
    }
