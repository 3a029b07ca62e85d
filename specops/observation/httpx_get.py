"""A metrics source's HTTP GET over httpx, for the shells that use httpx anyway.

Not imported by ``specops.observation`` itself, so the sidecar (which reads over aiohttp)
never loads httpx: the operator and ``specops advise`` import this module by name.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from specops.errors import MetricsError
from specops.observation._sources import MAX_ANSWER_BYTES, HttpGet, too_large

__all__ = ["httpx_get"]


def httpx_get(client: httpx.AsyncClient) -> HttpGet:
    """GET through ``client``: the status and body, or a MetricsError when the server cannot
    be read (httpx answers a redirect as it is, as the sidecar's aiohttp GET does)."""

    async def get(url: str, params: Mapping[str, str] | None = None) -> tuple[int, str]:
        try:
            async with client.stream("GET", url, params=params) as answer:
                body = bytearray()
                async for chunk in answer.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise too_large(url)
                return answer.status_code, body.decode(answer.encoding or "utf-8", "replace")
        except httpx.TimeoutException as exc:
            raise MetricsError(f"timed out reading {url}: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise MetricsError(f"cannot reach {url}: {exc!r}") from exc

    return get
