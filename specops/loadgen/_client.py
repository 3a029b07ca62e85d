"""Send streaming requests to any OpenAI-compatible server and time them (httpx, async)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from specops.loadgen._stats import RequestRecord

__all__ = ["LoadTarget", "run_closed_loop", "run_open_loop", "send_request"]

Progress = Callable[[RequestRecord], None]


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


async def send_request(client: httpx.AsyncClient, target: LoadTarget) -> RequestRecord:
    """One streamed request: first-token time, gaps between chunks, usage."""
    start = time.perf_counter()
    ttft = 0.0
    last = start
    gaps: list[float] = []
    chunks = 0
    usage: dict[str, int] = {}
    try:
        async with client.stream("POST", target.endpoint, json=target.payload()) as response:
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")
                return RequestRecord(
                    False, start, 0.0, 0.0, 0, 0, (), f"HTTP {response.status_code}: {body[:200]}"
                )
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if not _has_text(chunk):
                    continue
                now = time.perf_counter()
                if chunks == 0:
                    ttft = now - start
                else:
                    gaps.append(now - last)
                last = now
                chunks += 1
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        return RequestRecord(False, start, 0.0, 0.0, 0, 0, (), f"{type(exc).__name__}: {exc}")
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


def _client(connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits)


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

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal issued
        while (num_requests is None or issued < num_requests) and (
            deadline is None or time.perf_counter() < deadline
        ):
            issued += 1
            record = await send_request(client, target)
            records.append(record)
            if progress is not None:
                progress(record)

    async with _client(concurrency) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return records


async def run_open_loop(
    target: LoadTarget, arrivals: Sequence[float], *, progress: Progress | None = None
) -> list[RequestRecord]:
    """Send one request at each arrival time (seconds from now), whatever is in flight."""
    records: list[RequestRecord] = []
    origin = time.perf_counter()

    async def fire(client: httpx.AsyncClient, at: float) -> None:
        await asyncio.sleep(max(0.0, origin + at - time.perf_counter()))
        record = await send_request(client, target)
        records.append(record)
        if progress is not None:
            progress(record)

    async with _client(1000) as client:
        await asyncio.gather(*(fire(client, at) for at in arrivals))
    return records
