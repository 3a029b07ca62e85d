"""A round-robin reverse proxy per SpeculativeService, standing in for its ClusterIP Service.

Requests go to the service's ready engines in turn; responses stream through unchanged,
so server-sent events reach the client token by token.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import aiohttp
from aiohttp import web

__all__ = ["build_proxy_app"]

# Hop-by-hop headers, and those aiohttp recomputes (it decodes bodies on the way in).
_DROPPED = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "content-encoding",
        "host",
        "upgrade",
    }
)


def _forwardable(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _DROPPED}


def build_proxy_app(
    backends: Callable[[], Sequence[str]], session: aiohttp.ClientSession
) -> web.Application:
    """An app forwarding every request to the next of ``backends()`` (base URLs)."""
    turn = itertools.count()

    async def forward(request: web.Request) -> web.StreamResponse:
        urls = backends()
        if not urls:
            return web.json_response(
                {"error": {"message": "no ready engine behind this service", "code": 503}},
                status=503,
            )
        target = urls[next(turn) % len(urls)] + request.path_qs
        try:
            upstream = await session.request(
                request.method,
                target,
                headers=_forwardable(request.headers),
                data=await request.read(),
            )
        except aiohttp.ClientError as exc:
            return web.json_response(
                {"error": {"message": f"engine {target} failed: {exc}", "code": 502}},
                status=502,
            )
        async with upstream:
            response = web.StreamResponse(
                status=upstream.status, headers=_forwardable(upstream.headers)
            )
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    return app
