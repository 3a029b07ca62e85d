"""Drive a SimulatedEngine in virtual time: closed loop (fixed concurrency) and open loop."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specops_lab.sim._engine import FinishedRequest, SimulatedEngine

__all__ = [
    "ClosedLoopResult",
    "run_closed_loop",
    "run_open_loop",
]


@dataclass(frozen=True)
class ClosedLoopResult:
    """Output throughput over the measured window (after warm-up) and the requests in it."""

    start: float
    end: float
    output_tokens: int
    finished: tuple[FinishedRequest, ...]

    @property
    def throughput(self) -> float:
        """Generated tokens per second over the window."""
        return self.output_tokens / (self.end - self.start)


def run_closed_loop(
    engine: SimulatedEngine, concurrency: int, *, requests: int, warmup_requests: int = 0
) -> ClosedLoopResult:
    """Keep ``concurrency`` requests in flight until ``requests`` have finished.

    The window opens when ``warmup_requests`` have finished, so the ramp-up (every
    request prefilling at once) stays out of the throughput.
    """
    if concurrency < 1 or requests <= warmup_requests:
        raise ValueError("need concurrency >= 1 and requests > warmup_requests")
    for _ in range(concurrency):
        engine.add_request()
    done: list[FinishedRequest] = []
    start = engine.now
    tokens_at_start = engine.metrics().counters["vllm:generation_tokens"]
    opened = warmup_requests == 0
    while len(done) < requests:
        result = engine.step()
        for record in result.finished:
            engine.add_request()
            done.append(record)
            if not opened and len(done) >= warmup_requests:
                opened = True
                start = engine.now
                tokens_at_start = engine.metrics().counters["vllm:generation_tokens"]
    tokens = engine.metrics().counters["vllm:generation_tokens"] - tokens_at_start
    return ClosedLoopResult(start, engine.now, tokens, tuple(done[warmup_requests:]))


def run_open_loop(engine: SimulatedEngine, arrivals: Iterable[float]) -> list[FinishedRequest]:
    """Submit a request at each arrival time (seconds, increasing), then run until idle."""
    for arrival in arrivals:
        engine.run_until(arrival)
        engine.add_request(arrival=arrival)
    while engine.has_work:
        engine.step()
    return engine.take_finished()
