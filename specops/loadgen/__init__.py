"""Load generator: closed loop (fixed concurrency) and open loop (Poisson, rate traces).

Measures TTFT, TPOT (time per output token after the first), ITL (gaps between streamed
chunks) and throughput the way vLLM's serving benchmark does, against any
OpenAI-compatible URL.
"""

from specops.loadgen._arrivals import RatePoint, poisson_arrivals, trace_arrivals
from specops.loadgen._client import LoadTarget, run_closed_loop, run_open_loop, send_request
from specops.loadgen._stats import RequestRecord, summarize

__all__ = [
    "LoadTarget",
    "RatePoint",
    "RequestRecord",
    "poisson_arrivals",
    "run_closed_loop",
    "run_open_loop",
    "send_request",
    "summarize",
    "trace_arrivals",
]
