"""Shared pieces for the sidecar tests: fake servers behind either HTTP GET a source takes.

A :class:`Network` serves a plain function ``(path, query) -> (status, body)`` to a source:
through the operator's GET over httpx's MockTransport, or through the sidecar's GET over
an ``aiohttp.ClientSession`` reading a real aiohttp server on a loopback port. Tests that
take the ``network`` fixture run once with each.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp
import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from specops_lab.launch import free_ports
from specops_sidecar import aiohttp_get

from specops.observation import HttpGet
from specops.observation.httpx_get import httpx_get
from tests.observation.fake_vllm import FakeVllm

Handler = Callable[[str, Mapping[str, str]], tuple[int, str]]


@dataclass(frozen=True)
class Served:
    """A GET and the base URL at which it reaches the handler."""

    get: HttpGet
    url: str


def _location(status: int) -> dict[str, str]:
    """A redirect points somewhere the handler is also asked about."""
    return {"Location": "/moved"} if 300 <= status < 400 else {}


class Network(Protocol):
    async def serve(self, handler: Handler) -> Served: ...

    async def unreachable(self) -> Served:
        """Nothing listens at the URL."""
        ...

    async def hanging(self) -> Served:
        """The server never answers within the client's timeout."""
        ...


class HttpxNetwork:
    def __init__(self, stack: contextlib.AsyncExitStack) -> None:
        self._stack = stack

    async def _client(self, transport: Callable[[httpx.Request], httpx.Response]) -> Served:
        client = httpx.AsyncClient(transport=httpx.MockTransport(transport))
        await self._stack.enter_async_context(client)
        return Served(httpx_get(client), "http://engine:8000")

    async def serve(self, handler: Handler) -> Served:
        def answer(request: httpx.Request) -> httpx.Response:
            status, body = handler(request.url.path, dict(request.url.params))
            return httpx.Response(status, text=body, headers=_location(status))

        return await self._client(answer)

    async def unreachable(self) -> Served:
        def refuse(request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError("connection refused", request=request)

        return await self._client(refuse)

    async def hanging(self) -> Served:
        def late(request: httpx.Request) -> httpx.Response:
            raise httpx.ReadTimeout("no answer", request=request)

        return await self._client(late)


class AiohttpNetwork:
    def __init__(self, stack: contextlib.AsyncExitStack) -> None:
        self._stack = stack

    async def _session(self, url: str, timeout_s: float = 5.0) -> Served:
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(timeout_s))
        await self._stack.enter_async_context(session)
        return Served(aiohttp_get(session), url)

    async def _server(self, handle: Callable[[web.Request], Awaitable[web.Response]]) -> str:
        app = web.Application()
        app.router.add_get("/{path:.*}", handle)
        server = TestServer(app, host="127.0.0.1")
        await self._stack.enter_async_context(server)
        return str(server.make_url("")).rstrip("/")

    async def serve(self, handler: Handler) -> Served:
        async def handle(request: web.Request) -> web.Response:
            status, body = handler(request.path, dict(request.query))
            return web.Response(status=status, text=body, headers=_location(status))

        return await self._session(await self._server(handle))

    async def unreachable(self) -> Served:
        (port,) = free_ports(1)
        return await self._session(f"http://127.0.0.1:{port}")

    async def hanging(self) -> Served:
        async def handle(_: web.Request) -> web.Response:
            await asyncio.sleep(60.0)
            return web.Response()

        return await self._session(await self._server(handle), timeout_s=0.2)


@pytest.fixture(params=["httpx", "aiohttp"])
async def network(request: pytest.FixtureRequest) -> AsyncIterator[Network]:
    async with contextlib.AsyncExitStack() as stack:
        yield HttpxNetwork(stack) if request.param == "httpx" else AiohttpNetwork(stack)


def page_handler(engine: FakeVllm) -> Handler:
    def handle(path: str, _: Mapping[str, str]) -> tuple[int, str]:
        assert path == "/metrics"
        return 200, engine.page()

    return handle
