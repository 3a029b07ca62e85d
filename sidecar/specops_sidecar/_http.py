"""The sidecar's HTTP GET for its metrics source, over an ``aiohttp.ClientSession``."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from specops.errors import MetricsError
from specops.observation import MAX_ANSWER_BYTES, HttpGet, too_large

__all__ = ["aiohttp_get"]


def aiohttp_get(session: aiohttp.ClientSession) -> HttpGet:
    """GET through ``session``: the status and body, or a MetricsError when the server cannot
    be read. Redirects are answers like any other, as the operator's httpx has them."""

    async def get(url: str, params: Mapping[str, str] | None = None) -> tuple[int, str]:
        try:
            async with session.get(url, params=params, allow_redirects=False) as response:
                body = bytearray()
                async for chunk in response.content.iter_chunked(65536):
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise too_large(url)
                return response.status, body.decode(response.charset or "utf-8", "replace")
        except TimeoutError as exc:
            raise MetricsError(f"timed out reading {url}: {exc!r}") from exc
        except aiohttp.ClientError as exc:  # its repr holds the whole connection key
            raise MetricsError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc

    return get
