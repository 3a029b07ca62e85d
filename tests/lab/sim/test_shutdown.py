"""SIGTERM to a real ``specops sim serve``: it drains as vLLM does with --shutdown-timeout."""

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from specops_lab.launch import (
    free_ports,
    spawn,
    specops_executable,
    stop_process,
    wait_until_answers,
)

pytestmark = pytest.mark.integration

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TOKENS = 400


@contextmanager
def _engine(tmp_path: Path, shutdown_timeout: int) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    argv: tuple[str, ...] = (specops_executable(), "sim", "serve", MODEL, "--host", "127.0.0.1")
    argv += ("--port", str(port), "--shutdown-timeout", str(shutdown_timeout))
    process = spawn(argv, tmp_path / "engine.log", tie_to_parent=True)
    try:
        wait_until_answers(f"{url}/health", process)
        yield process, url
    finally:
        stop_process(process)


def _body(stream: bool) -> dict[str, Any]:
    return {
        "model": MODEL,
        "prompt": "count",
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "stream": stream,
        "stream_options": {"include_usage": True},
    }


async def _until_logged(log: Path, text: str) -> None:
    while text not in log.read_text(errors="replace"):
        await asyncio.sleep(0.02)


async def _stream_through_sigterm(
    process: subprocess.Popen[bytes],
    url: str,
    while_draining: Callable[[httpx.AsyncClient], Awaitable[None]] | None = None,
) -> list[dict[str, Any]]:
    """Start a long stream and SIGTERM the engine after its first chunk (then, once the engine
    says it is shutting down, run ``while_draining``); the stream's chunks."""
    async with (
        httpx.AsyncClient(timeout=60.0) as client,
        client.stream("POST", f"{url}/v1/completions", json=_body(True)) as response,
    ):
        assert response.status_code == 200
        lines = response.aiter_lines()
        events = [await anext(lines)]
        process.send_signal(signal.SIGTERM)
        if while_draining is not None:
            await while_draining(client)
        events += [line async for line in lines]
    data = [line.removeprefix("data: ") for line in events if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(item) for item in data[:-1]]


def _exit_status(process: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 30.0
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return process.wait(timeout=1.0)


async def test_sigterm_lets_a_running_stream_finish_and_refuses_new_requests(
    tmp_path: Path,
) -> None:
    refused: list[int] = []

    async def new_request(client: httpx.AsyncClient) -> None:
        await _until_logged(tmp_path / "engine.log", "shutting down")
        response = await client.post(f"{url}/v1/completions", json=_body(False))
        refused.append(response.status_code)

    with _engine(tmp_path, shutdown_timeout=30) as (process, url):
        chunks = await _stream_through_sigterm(process, url, new_request)
        assert refused == [503]
        assert chunks[-1]["usage"]["completion_tokens"] == TOKENS
        assert chunks[-2]["choices"][0]["finish_reason"] == "length"
        assert _exit_status(process) == 0


async def test_without_a_shutdown_timeout_sigterm_aborts_running_requests(tmp_path: Path) -> None:
    with _engine(tmp_path, shutdown_timeout=0) as (process, url):
        chunks = await _stream_through_sigterm(process, url)
        assert chunks[-2]["choices"][0]["finish_reason"] == "abort"
        assert chunks[-1]["usage"]["completion_tokens"] < TOKENS
        assert _exit_status(process) == 0
