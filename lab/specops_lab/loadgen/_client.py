"""Send streaming requests to any OpenAI-compatible server and time them (aiohttp, async).

The client must hold the load it is asked for on a small machine, so it stays cheap per
request and per streamed chunk: aiohttp's connection pool (httpx's scans every pooled
connection for each request, quadratic in the concurrency) and one JSON parse per chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from specops_lab.loadgen._stats import RequestRecord

__all__ = [
    "EngineLoad",
    "LoadTarget",
    "open_session",
    "run_closed_loop",
    "run_open_loop",
    "send_request",
    "watch_engine",
]

Progress = Callable[[RequestRecord], None]

_DATA = b"data: "
_DONE = b"[DONE]"


@dataclass(frozen=True)
class LoadTarget:
    """Where and what to send: base URL, model, prompt, output length, API flavour."""

    url: str
    model: str
    prompt: str = "Explain speculative decoding."
    max_tokens: int = 128
    chat: bool = False
    ignore_eos: bool = True

    def payload(self) -> dict[str, object]:
        body: dict[str, object] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": self.ignore_eos,
        }
        if self.chat:
            body["messages"] = [{"role": "user", "content": self.prompt}]
        else:
            body["prompt"] = self.prompt
        return body

    @property
    def endpoint(self) -> str:
        path = "/v1/chat/completions" if self.chat else "/v1/completions"
        return self.url.rstrip("/") + path


def _has_text(chunk: dict[str, object]) -> bool:
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices:
        return False
    choice = choices[0]
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return bool(text)


def _event(event: bytes) -> dict[str, object] | None:
    """The JSON object of one server-sent event (``data: {...}``); None for ``[DONE]``,
    comments and anything that is not data."""
    if not event.startswith(_DATA):
        return None
    data = event[len(_DATA) :].strip()
    if data == _DONE:
        return None
    found = json.loads(data)
    return found if isinstance(found, dict) else None


def open_session(connections: int) -> aiohttp.ClientSession:
    """A session that keeps up to ``connections`` connections open (one per request in
    flight), without a total timeout: a long generation is no failure."""
    connector = aiohttp.TCPConnector(limit=max(1, connections), limit_per_host=0)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30.0, sock_read=600.0),
    )


def _failed(start: float, error: str) -> RequestRecord:
    return RequestRecord(False, start, 0.0, 0.0, 0, 0, (), error)


async def send_request(session: aiohttp.ClientSession, target: LoadTarget) -> RequestRecord:
    """One streamed request: first-token time, gaps between chunks, usage."""
    start = time.perf_counter()
    ttft = 0.0
    last = start
    gaps: list[float] = []
    chunks = 0
    usage: dict[str, int] = {}
    try:
        async with session.post(target.endpoint, json=target.payload()) as response:
            if response.status != 200:
                body = (await response.read()).decode(errors="replace")
                return _failed(start, f"HTTP {response.status}: {body[:200]}")
            buffer = b""
            async for data in response.content.iter_any():
                buffer += data
                *events, buffer = buffer.split(b"\n\n")
                for event in events:
                    chunk = _event(event)
                    if chunk is None:
                        continue
                    found = chunk.get("usage")
                    if isinstance(found, dict):
                        usage = found
                    if not _has_text(chunk):
                        continue
                    now = time.perf_counter()
                    if chunks == 0:
                        ttft = now - start
                    else:
                        gaps.append(now - last)
                    last = now
                    chunks += 1
    except (TimeoutError, aiohttp.ClientError, json.JSONDecodeError) as exc:
        return _failed(start, f"{type(exc).__name__}: {exc}")
    latency = time.perf_counter() - start
    return RequestRecord(
        ok=chunks > 0,
        start=start,
        ttft=ttft,
        latency=latency,
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        output_tokens=int(usage.get("completion_tokens", chunks)),
        itl=tuple(gaps),
        error="" if chunks else "no tokens",
    )


async def run_closed_loop(
    target: LoadTarget,
    concurrency: int,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
    progress: Progress | None = None,
) -> list[RequestRecord]:
    """``concurrency`` workers each send the next request as soon as theirs finishes."""
    if num_requests is None and duration_s is None:
        raise ValueError("give num_requests or duration_s")
    records: list[RequestRecord] = []
    deadline = None if duration_s is None else time.perf_counter() + duration_s
    issued = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal issued
        while (num_requests is None or issued < num_requests) and (
            deadline is None or time.perf_counter() < deadline
        ):
            issued += 1
            record = await send_request(session, target)
            records.append(record)
            if progress is not None:
                progress(record)

    async with open_session(concurrency) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return records


async def run_open_loop(
    target: LoadTarget, arrivals: Sequence[float], *, progress: Progress | None = None
) -> list[RequestRecord]:
    """Send one request at each arrival time (seconds from now), whatever is in flight."""
    records: list[RequestRecord] = []
    origin = time.perf_counter()

    async def fire(session: aiohttp.ClientSession, at: float) -> None:
        await asyncio.sleep(max(0.0, origin + at - time.perf_counter()))
        record = await send_request(session, target)
        records.append(record)
        if progress is not None:
            progress(record)

    async with open_session(1000) as session:
        await asyncio.gather(*(fire(session, at) for at in arrivals))
    return records


_RUNNING = "vllm:num_requests_running"
_WAITING = "vllm:num_requests_waiting"
_REQUEST_TIME = "vllm:e2e_request_latency_seconds_sum"


def _samples(page: str) -> dict[str, float]:
    """Summed samples of the series the watcher reads, from a Prometheus text page."""
    found = dict.fromkeys((_RUNNING, _WAITING, _REQUEST_TIME), 0.0)
    for line in page.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in found:
            found[name] += float(line.rsplit(" ", 1)[1])
    return found


@dataclass
class EngineLoad:
    """What the engine's own metrics say it held: ``in_flight`` its running + waiting
    requests, sampled; ``request_seconds`` the growth of its e2e request latency sum (the
    requests' time in it), over ``seconds`` of wall time."""

    in_flight: list[float]
    request_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def mean_in_flight(self) -> float | None:
        return sum(self.in_flight) / len(self.in_flight) if self.in_flight else None

    @property
    def request_time_concurrency(self) -> float | None:
        """Requests in flight by request time over wall time (requests that finished)."""
        return self.request_seconds / self.seconds if self.seconds > 0 else None


async def watch_engine(
    session: aiohttp.ClientSession, url: str, stop: asyncio.Event, every_s: float = 1.0
) -> EngineLoad | None:
    """Sample the engine's /metrics at ``url`` every ``every_s`` until ``stop`` is set;
    None when the server has no vLLM metrics page."""
    metrics = url.rstrip("/") + "/metrics"

    async def read() -> dict[str, float] | None:
        try:
            async with session.get(metrics) as response:
                if response.status != 200:
                    return None
                return _samples(await response.text())
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return None

    first = await read()
    if first is None:
        return None
    started = time.perf_counter()
    load = EngineLoad(in_flight=[])
    last = first
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
        found = await read()
        if found is None:
            continue
        last = found
        if not stop.is_set():
            load.in_flight.append(found[_RUNNING] + found[_WAITING])
    load.request_seconds = last[_REQUEST_TIME] - first[_REQUEST_TIME]
    load.seconds = time.perf_counter() - started
    return load
