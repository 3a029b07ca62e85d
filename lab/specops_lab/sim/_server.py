"""The simulated engine behind vLLM's OpenAI-compatible HTTP API, in real time.

A thin shell: requests are parsed into ``add_request`` calls, one task paces
``engine.step()`` against the event loop's clock, and each step's tokens are handed
to the waiting responses. /metrics renders the engine's snapshot as vLLM does.

A step that starts late because the event loop was busy, or the process waited for a CPU,
is not a slower step: a busy engine keeps its own schedule and steps back to back until it
has caught up, as long as it is less than ``_CATCH_UP_S`` behind the clock (further behind,
it drops the rest: the machine cannot keep up). Resuming each step only when the loop got
to it made every step about 2 ms longer than its truth on a busy two-core machine (1.2x at
low load). An idle engine starts again at the clock; a request that arrives while the
engine catches up arrives at the engine's own time, so no latency counts the lag.

``serve`` stops on SIGTERM or SIGINT as vLLM 0.33.0's API server does with
``--shutdown-timeout``: the listener stays open but new requests are refused, the engine
keeps stepping so running requests (streams included) finish, and whatever is still
running when the timeout ends is finished with reason "abort" (with the default 0, at
once); then the process exits 0.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import math
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web
from prometheus_client.exposition import gzip_accepted

from specops_lab.sim._engine import FinishedRequest, SimulatedEngine
from specops_lab.sim._exposition import CONTENT_TYPE, render_metrics

__all__ = ["RUNNER_OPTIONS", "ServerOptions", "build_app", "count_prompt_tokens", "serve"]

_log = logging.getLogger(__name__)
_WORDS = (
    "the",
    " model",
    " drafts",
    " tokens",
    " and",
    " the",
    " target",
    " verifies",
    " them",
    ".",
)

# Once every request has its last item, how long their handlers get to write it out.
_HANDLER_GRACE_S = 5.0
# How far a busy engine may fall behind the clock and still catch up.
_CATCH_UP_S = 0.25

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class ServerOptions:
    served_model_name: str
    model: str
    startup_delay_s: float = 0.0
    shutdown_timeout_s: float = 0.0
    """vLLM's --shutdown-timeout: how long running requests may take after SIGTERM."""


@dataclass(frozen=True)
class _Aborted:
    """The server cut a request short at shutdown; vLLM finishes it with reason "abort"."""

    finish_reason: str = "abort"


_ABORTED = _Aborted()
_Item = int | FinishedRequest | _Aborted | None


def count_prompt_tokens(text: str) -> int:
    """A stand-in tokenizer: about four characters per token, at least one."""
    return max(1, math.ceil(len(text.encode("utf-8")) / 4))


def _error(message: str, status: HTTPStatus, kind: str, param: str | None = None) -> web.Response:
    """vLLM's ErrorResponse: {"error": {"message", "type", "param", "code"}}."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": status.value}}
    return web.json_response(body, status=status.value)


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _int_field(body: dict[str, Any], key: str, default: int | None, minimum: int) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _BadRequest(f"{key} must be an integer >= {minimum}, got {value!r}", key)
    return value


def _prompt_tokens(body: dict[str, Any], chat: bool) -> int:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadRequest("messages must be a non-empty list", "messages")
        total = 0
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or "role" not in message:
                raise _BadRequest(f"messages[{index}] must be an object with a role", "messages")
            content = message.get("content") or ""
            if isinstance(content, list):
                content = " ".join(
                    str(part.get("text", "")) for part in content if isinstance(part, dict)
                )
            total += 4 + count_prompt_tokens(str(content))
        return total
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return count_prompt_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return count_prompt_tokens(prompt[0])
    raise _BadRequest("prompt must be a string or a list of token ids", "prompt")


def _fitted_max_tokens(max_model_len: int, prompt: int, max_tokens: int | None, key: str) -> int:
    """vLLM's checks and clamp (renderers/params.py, serve/utils/api_utils.py get_max_tokens):
    a prompt longer than max_model_len or a max_tokens above it is refused; otherwise
    max_tokens is cut to the room the prompt leaves, which must hold one token."""
    if prompt > max_model_len:
        raise _BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {prompt} input tokens, which exceeds this limit even without any "
            "output tokens. Please reduce the length of the input prompt.",
            "input_tokens",
        )
    if max_tokens is not None and max_tokens > max_model_len:
        raise _BadRequest(
            f"{key}={max_tokens} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            key,
        )
    room = max_model_len - prompt
    fitted = room if max_tokens is None else min(max_tokens, room)
    if fitted < 1:
        raise _BadRequest(f"max_tokens must be at least 1, got {fitted}.", "max_tokens")
    return fitted


class _Server:
    def __init__(self, engine: SimulatedEngine, options: ServerOptions) -> None:
        self.engine = engine
        self.options = options
        self.loaded = False
        self.dead = False
        self.created = int(time.time())
        self.metrics_created = time.time()
        self.draining = False
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._streams: dict[str, asyncio.Queue[_Item]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._origin = 0.0

    def clock(self) -> float:
        """Engine seconds now: the event loop's clock since the engine started."""
        return asyncio.get_running_loop().time() - self._origin

    def arrival(self) -> float:
        """When a request arriving now arrives on the engine's clock: the clock, or, while
        a busy engine catches up, the engine's own time."""
        now = self.clock()
        if not self.engine.has_work:
            return now
        return min(now, max(self.engine.now, now - _CATCH_UP_S))

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self, _: web.Application) -> None:
        self._tasks.append(asyncio.create_task(self._load_then_run()))

    async def stop(self, _: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def drain(self) -> None:
        """Refuse new requests, give running ones ``shutdown_timeout_s`` to finish (the
        engine keeps stepping), then finish the rest as aborted."""
        self.draining = True
        timeout_s = self.options.shutdown_timeout_s
        if self._streams:
            _log.info(
                "shutting down: %d requests running, waiting up to %g s",
                len(self._streams),
                timeout_s,
            )
        with suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        if self._streams:
            _log.warning("shutting down: aborting %d requests", len(self._streams))
        for queue in self._streams.values():
            queue.put_nowait(_ABORTED)

    async def _load_then_run(self) -> None:
        await asyncio.sleep(self.options.startup_delay_s)
        self.loaded = True
        self.metrics_created = time.time()  # vLLM's stat logger starts once the model loads
        _log.info("model %s loaded; serving", self.options.model)
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception:
            _log.exception("engine failed; /health now answers 503")
            self.dead = True
            for queue in self._streams.values():
                queue.put_nowait(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._origin = loop.time() - self.engine.now
        engine = self.engine
        while True:
            if not engine.has_work:
                self._wake.clear()
                await self._wake.wait()
                engine.now = max(engine.now, self.clock())
            engine.now = max(engine.now, self.clock() - _CATCH_UP_S)
            result = engine.step()
            delay = result.end - self.clock()
            if delay > 0:
                await asyncio.sleep(delay)
            for request_id, tokens in result.emitted:
                queue = self._streams.get(request_id)
                if queue is not None:
                    queue.put_nowait(tokens)
            for record in result.finished:
                queue = self._streams.get(record.request_id)
                if queue is not None:
                    queue.put_nowait(record)

    # -- middleware and plain endpoints ------------------------------------------------

    @web.middleware
    async def guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Nothing but /health answers before the model loads; nothing escapes as a crash."""
        if not self.loaded and request.path != "/health":
            return _error(
                "the model is still loading",
                HTTPStatus.SERVICE_UNAVAILABLE,
                "ServiceUnavailableError",
            )
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status == HTTPStatus.NOT_FOUND:
                return _error(f"{request.path} not found", HTTPStatus.NOT_FOUND, "NotFoundError")
            if exc.status == HTTPStatus.METHOD_NOT_ALLOWED:
                return _error(
                    f"{request.method} not allowed",
                    HTTPStatus.METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                )
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            _log.exception("request to %s failed", request.path)
            return _error(str(exc), HTTPStatus.INTERNAL_SERVER_ERROR, "InternalServerError")

    async def health(self, _: web.Request) -> web.Response:
        if not self.loaded or self.dead:
            return web.Response(status=HTTPStatus.SERVICE_UNAVAILABLE.value)
        return web.Response(status=HTTPStatus.OK.value)

    async def models(self, _: web.Request) -> web.Response:
        card = {
            "id": self.options.served_model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": self.options.model,
            "parent": None,
            "max_model_len": self.engine.config.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(self, request: web.Request) -> web.Response:
        """vLLM's page (the text format: see specops_lab.sim._exposition), gzip if accepted."""
        page = render_metrics(
            self.engine.metrics(),
            self.options.served_model_name,
            speculative=self.engine.speculative_config is not None,
            created=self.metrics_created,
        )
        headers = {"Content-Type": CONTENT_TYPE}
        if gzip_accepted(request.headers.get("Accept-Encoding", "")):
            page = gzip.compress(page)
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=page, headers=headers)

    # -- generation --------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        if self.dead:
            return _error("the engine is dead", HTTPStatus.INTERNAL_SERVER_ERROR, "EngineDeadError")
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        lengths = self._lengths(body, chat)
        if isinstance(lengths, web.Response):
            return lengths
        prompt_tokens, max_tokens = lengths
        stream = bool(body.get("stream", False))
        options = body.get("stream_options") or {}
        include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
        if self.draining:
            return _error(
                "the server is shutting down",
                HTTPStatus.SERVICE_UNAVAILABLE,
                "ServiceUnavailableError",
            )
        prefix = "chatcmpl" if chat else "cmpl"
        request_id = f"{prefix}-{uuid.uuid4().hex}"
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._streams[request_id] = queue
        self._idle.clear()
        self.engine.add_request(
            request_id,
            arrival=self.arrival(),
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            ignore_eos=bool(body.get("ignore_eos", False)),
        )
        self._wake.set()
        responder = _Responder(request_id, self.options.served_model_name, chat, prompt_tokens)
        try:
            if stream:
                return await responder.stream(request, queue, include_usage)
            return await responder.complete(queue)
        except (ConnectionResetError, asyncio.CancelledError) as exc:
            # As vLLM: a client that disconnects aborts its request; that is no error.
            _log.debug("request %s aborted: the client disconnected", request_id)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return web.Response()  # nobody is left to read it
        finally:
            del self._streams[request_id]
            if not self._streams:
                self._idle.set()
            self.engine.abort(request_id)  # a no-op once the request has finished

    def _lengths(self, body: dict[str, Any], chat: bool) -> tuple[int, int] | web.Response:
        """The request's prompt tokens and fitted max_tokens, or vLLM's error response."""
        model = body.get("model", self.options.served_model_name)
        if model != self.options.served_model_name:
            return _error(
                f"The model `{model}` does not exist.",
                HTTPStatus.NOT_FOUND,
                "NotFoundError",
                "model",
            )
        try:
            prompt_tokens = _prompt_tokens(body, chat)
            key = (
                "max_completion_tokens"
                if chat and "max_completion_tokens" in body
                else "max_tokens"
            )
            max_tokens = _int_field(body, key, None if chat else 16, 1)
            if _int_field(body, "n", 1, 1) != 1:
                raise _BadRequest("only n=1 is supported", "n")
            fitted = _fitted_max_tokens(
                self.engine.config.max_model_len, prompt_tokens, max_tokens, key
            )
        except _BadRequest as exc:
            return _error(str(exc), HTTPStatus.BAD_REQUEST, "BadRequestError", exc.param)
        return prompt_tokens, fitted


async def _json_object(request: web.Request) -> dict[str, Any] | web.Response:
    """The request's JSON object body, or vLLM's error response."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _error(
            "the request body is not valid JSON", HTTPStatus.BAD_REQUEST, "BadRequestError"
        )
    if not isinstance(body, dict):
        return _error(
            "the request body must be a JSON object", HTTPStatus.BAD_REQUEST, "BadRequestError"
        )
    return body


class _Responder:
    """Turns a request's token counts into OpenAI completion or chat objects."""

    def __init__(self, request_id: str, model: str, chat: bool, prompt_tokens: int) -> None:
        self.request_id = request_id
        self.model = model
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        self.created = int(time.time())
        self.generated = 0

    def _text(self, tokens: int) -> str:
        start = self.generated
        self.generated += tokens
        return "".join(_WORDS[i % len(_WORDS)] for i in range(start, self.generated))

    def _usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.generated,
            "total_tokens": self.prompt_tokens + self.generated,
        }

    def _object(self, streaming: bool) -> str:
        if self.chat:
            return "chat.completion.chunk" if streaming else "chat.completion"
        return "text_completion"

    def _choice(self, text: str, finish: str | None, streaming: bool) -> dict[str, Any]:
        if not self.chat:
            return {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        key = "delta" if streaming else "message"
        return {
            "index": 0,
            key: {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish,
        }

    def _envelope(self, choices: list[dict[str, Any]], streaming: bool) -> dict[str, Any]:
        return {
            "id": self.request_id,
            "object": self._object(streaming),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    async def complete(self, queue: asyncio.Queue[_Item]) -> web.Response:
        parts: list[str] = []
        while True:
            item = await queue.get()
            if item is None:
                return _error(
                    "the engine died", HTTPStatus.INTERNAL_SERVER_ERROR, "EngineDeadError"
                )
            if isinstance(item, FinishedRequest | _Aborted):
                body = self._envelope(
                    [self._choice("".join(parts), item.finish_reason, False)], False
                )
                body["usage"] = self._usage()
                return web.json_response(body)
            parts.append(self._text(item))

    async def stream(
        self,
        request: web.Request,
        queue: asyncio.Queue[_Item],
        include_usage: bool,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)

        async def send(payload: dict[str, Any]) -> None:
            await response.write(f"data: {json.dumps(payload)}\n\n".encode())

        while True:
            item = await queue.get()
            if item is None:
                await send(
                    {
                        "error": {
                            "message": "the engine died",
                            "type": "EngineDeadError",
                            "param": None,
                            "code": 500,
                        }
                    }
                )
                break
            if isinstance(item, FinishedRequest | _Aborted):
                await send(self._envelope([self._choice("", item.finish_reason, True)], True))
                if include_usage:
                    final = self._envelope([], True)
                    final["usage"] = self._usage()
                    await send(final)
                break
            await send(self._envelope([self._choice(self._text(item), None, True)], True))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


_SERVER = web.AppKey("server", _Server)

RUNNER_OPTIONS: dict[str, Any] = {"handler_cancellation": True}
"""How the app must be run: a client's disconnect cancels its handler (vLLM aborts the
request), which aiohttp does only when asked."""


def build_app(engine: SimulatedEngine, options: ServerOptions) -> web.Application:
    """The aiohttp application; the engine must have been built with ``track_tokens=True``."""
    if not engine.track_tokens:
        raise ValueError("the HTTP server needs an engine built with track_tokens=True")
    server = _Server(engine, options)
    app = web.Application(middlewares=[server.guard])
    app[_SERVER] = server
    app.on_startup.append(server.start)
    app.on_cleanup.append(server.stop)
    app.router.add_get("/health", server.health)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/metrics", server.metrics)
    app.router.add_post("/v1/completions", server.completions)
    app.router.add_post("/v1/chat/completions", server.chat_completions)
    return app


async def serve(app: web.Application, host: str, port: int) -> None:
    """Serve ``app`` (from :func:`build_app`) until SIGTERM or SIGINT, then drain and stop."""
    runner = web.AppRunner(app, shutdown_timeout=_HANDLER_GRACE_S, **RUNNER_OPTIONS)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await app[_SERVER].drain()
    finally:
        await runner.cleanup()
