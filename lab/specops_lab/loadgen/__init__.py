"""Load generator: closed loop (fixed concurrency) and open loop (Poisson, rate traces).

Measures TTFT, TPOT (time per output token after the first), ITL (gaps between streamed
chunks) and throughput the way vLLM's serving benchmark does, against any
OpenAI-compatible URL, and what the engine held: its own running + waiting requests and
request time, beside the requests the client had in flight.
"""

from specops_lab.loadgen._arrivals import RatePoint, poisson_arrivals, trace_arrivals
from specops_lab.loadgen._client import (
    EngineLoad,
    LoadTarget,
    open_session,
    run_closed_loop,
    run_open_loop,
    send_request,
    watch_engine,
)
from specops_lab.loadgen._stats import RequestRecord, summarize

__all__ = [
    "EngineLoad",
    "LoadTarget",
    "RatePoint",
    "RequestRecord",
    "open_session",
    "poisson_arrivals",
    "run_closed_loop",
    "run_open_loop",
    "send_request",
    "summarize",
    "trace_arrivals",
    "watch_engine",
]
