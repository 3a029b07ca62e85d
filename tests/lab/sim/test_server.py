import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import suppress

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families
from specops_lab.sim import EngineConfig, SimulatedEngine, StepResult, Workload, load_workload
from specops_lab.sim import parse_speculative_config as parse
from specops_lab.sim._server import RUNNER_OPTIONS, ServerOptions, build_app

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _engine() -> SimulatedEngine:
    """The served engine: GSM8K, EAGLE with k = 3, token ids kept."""
    return SimulatedEngine(
        Workload(load_workload("gsm8k")),
        EngineConfig(
            served_model_name="llama",
            speculative=parse('{"method": "eagle", "model": "d", "num_speculative_tokens": 3}'),
        ),
        track_tokens=True,
    )


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    engine = _engine()
    app = build_app(engine, ServerOptions("llama", MODEL, startup_delay_s=0.2))
    async with TestClient(TestServer(app, **RUNNER_OPTIONS)) as test_client:
        yield test_client


async def _wait_loaded(client: TestClient) -> None:  # type: ignore[type-arg]
    for _ in range(100):
        if (await client.get("/health")).status == 200:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("never became healthy")


async def test_health_is_503_until_the_model_loads(client: TestClient) -> None:  # type: ignore[type-arg]
    assert (await client.get("/health")).status == 503
    assert (await client.get("/v1/models")).status == 503
    await _wait_loaded(client)
    models = await (await client.get("/v1/models")).json()
    assert models["data"][0]["id"] == "llama"


async def test_completion_counts_usage_and_paces_tokens(client: TestClient) -> None:  # type: ignore[type-arg]
    await _wait_loaded(client)
    loop = asyncio.get_running_loop()
    started = loop.time()
    response = await client.post(
        "/v1/completions",
        json={"model": "llama", "prompt": "x" * 400, "max_tokens": 40, "ignore_eos": True},
    )
    body = await response.json()
    assert response.status == 200
    assert body["usage"] == {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140}
    assert body["choices"][0]["finish_reason"] == "length"
    # 40 tokens at no more than k + 1 = 4 per step of at least 9 ms each.
    assert loop.time() - started > 10 * 0.009


async def test_streaming_chat_sends_chunks_usage_and_done(client: TestClient) -> None:  # type: ignore[type-arg]
    await _wait_loaded(client)
    response = await client.post(
        "/v1/chat/completions",
        json={
            "model": "llama",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 12,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    events = [
        line[6:] for line in (await response.text()).splitlines() if line.startswith("data: ")
    ]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] == 12
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


@pytest.mark.parametrize(
    ("path", "payload", "status", "param"),
    [
        ("/v1/completions", {"model": "other", "prompt": "x"}, 404, "model"),
        ("/v1/completions", {"model": "llama", "prompt": 3}, 400, "prompt"),
        ("/v1/completions", {"model": "llama", "prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
        ("/v1/chat/completions", {"model": "llama", "messages": []}, 400, "messages"),
        (
            "/v1/completions",
            {"model": "llama", "prompt": "x", "max_tokens": 10**7},
            400,
            "max_tokens",
        ),
    ],
)
async def test_bad_requests_get_vllms_error_shape(
    client: TestClient,  # type: ignore[type-arg]
    path: str,
    payload: dict[str, object],
    status: int,
    param: str,
) -> None:
    await _wait_loaded(client)
    response = await client.post(path, json=payload)
    body = await response.json()
    assert response.status == status
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert (body["error"]["code"], body["error"]["param"]) == (status, param)
    assert (await client.get("/health")).status == 200


async def test_invalid_json_and_unknown_paths(client: TestClient) -> None:  # type: ignore[type-arg]
    await _wait_loaded(client)
    response = await client.post("/v1/completions", data=b"{nope")
    assert response.status == 400 and (await response.json())["error"]["type"] == "BadRequestError"
    response = await client.get("/v2/nothing")
    assert response.status == 404 and "error" in await response.json()


async def test_metrics_parse_and_counters_only_grow(client: TestClient) -> None:  # type: ignore[type-arg]
    await _wait_loaded(client)

    async def scrape() -> dict[str, float]:
        page = await (await client.get("/metrics")).text()
        return {
            f"{s.name}{sorted(s.labels.items())}": s.value
            for family in text_string_to_metric_families(page)
            if family.type in ("counter", "histogram")
            for s in family.samples
        }

    before = await scrape()
    await asyncio.gather(
        *(
            client.post("/v1/completions", json={"model": "llama", "prompt": "hi", "max_tokens": 8})
            for _ in range(4)
        )
    )
    after = await scrape()
    assert before.keys() == after.keys()
    assert all(after[key] >= before[key] for key in before)
    success = "vllm:request_success_total"
    labels = [("engine", "0"), ("finished_reason", "length"), ("model_name", "llama")]
    assert after[f"{success}{labels}"] == 4


async def test_time_to_first_token_does_not_count_idle_time(client: TestClient) -> None:  # type: ignore[type-arg]
    await _wait_loaded(client)
    await asyncio.sleep(0.5)
    await client.post("/v1/completions", json={"model": "llama", "prompt": "hi", "max_tokens": 2})
    page = await (await client.get("/metrics")).text()
    ttft = {
        s.name: s.value
        for family in text_string_to_metric_families(page)
        if family.name == "vllm:time_to_first_token_seconds"
        for s in family.samples
    }
    assert ttft["vllm:time_to_first_token_seconds_count"] == 1
    assert ttft["vllm:time_to_first_token_seconds_sum"] < 0.2


async def _scrape(client: TestClient, family: str) -> dict[str, float]:  # type: ignore[type-arg]
    page = await (await client.get("/metrics")).text()
    return {
        f"{s.name}{s.labels.get('finished_reason', '')}": s.value
        for f in text_string_to_metric_families(page)
        if f.name == family
        for s in f.samples
    }


@pytest.mark.parametrize("stream", [True, False])
async def test_a_client_that_disconnects_aborts_its_request_quietly(
    client: TestClient,  # type: ignore[type-arg]
    caplog: pytest.LogCaptureFixture,
    stream: bool,
) -> None:
    await _wait_loaded(client)
    body = {"model": "llama", "prompt": "x", "max_tokens": 5000, "ignore_eos": True}
    if stream:
        response = await client.post("/v1/completions", json={**body, "stream": True})
        await response.content.readline()
        response.close()  # the client goes away mid-stream
    else:
        with suppress(TimeoutError):  # the client gives up waiting
            await asyncio.wait_for(client.post("/v1/completions", json=body), 0.3)
    await asyncio.sleep(0.1)
    # A short request steps the engine: were the long one still running, it would count.
    done = await client.post("/v1/completions", json={**body, "max_tokens": 2})
    assert done.status == 200
    running = await _scrape(client, "vllm:num_requests_running")
    assert running == {"vllm:num_requests_running": 0.0}
    success = await _scrape(client, "vllm:request_success")
    assert success["vllm:request_success_totalabort"] == 0
    assert sum(success.values()) == 1  # the short request
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_metrics_are_text_with_vllms_names_and_gzip_when_accepted(client: TestClient) -> None:  # type: ignore[type-arg]
    await _wait_loaded(client)
    plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
    assert plain.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "Content-Encoding" not in plain.headers
    # What Prometheus asks for: still the text format, where the names keep their colons.
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    asked = await client.get("/metrics", headers={"Accept": accept, "Accept-Encoding": "gzip"})
    assert asked.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert asked.headers["Content-Encoding"] == "gzip"
    assert "vllm:num_requests_running{" in await asked.text()  # the client inflates it


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "status", "served"),
    [
        ("x" * 400, 100, 200, 28),  # 100 prompt tokens leave room for 28: served, cut short
        ("x" * 400, 129, 400, "max_tokens"),  # above max_model_len itself
        ("x" * 516, 1, 400, "input_tokens"),  # 129 prompt tokens
        ("x" * 512, 1, 400, "max_tokens"),  # 128 prompt tokens leave no room
    ],
)
async def test_max_tokens_is_cut_to_the_room_the_prompt_leaves(
    prompt: str, max_tokens: int, status: int, served: int | str
) -> None:
    engine = SimulatedEngine(
        Workload(load_workload("gsm8k")),
        EngineConfig(served_model_name="llama", max_model_len=128),
        track_tokens=True,
    )
    app = build_app(engine, ServerOptions("llama", MODEL))
    async with TestClient(TestServer(app, **RUNNER_OPTIONS)) as small:
        await _wait_loaded(small)
        body = {"model": "llama", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
        response = await small.post("/v1/completions", json=body)
        answer = await response.json()
    assert response.status == status
    if status == 200:
        assert answer["usage"]["completion_tokens"] == served
        assert answer["choices"][0]["finish_reason"] == "length"
    else:
        assert answer["error"]["param"] == served


async def test_a_busy_event_loop_does_not_slow_the_engines_steps() -> None:
    """The loop is blocked a few ms at a time (other handlers, a process waiting for a CPU):
    the engine keeps its own schedule, so the wall time is its steps' time, not more."""
    engine = _engine()
    stepped: list[float] = []
    step = engine.step

    def timed() -> StepResult:
        result = step()
        stepped.append(result.end - result.start)
        return result

    engine.step = timed  # type: ignore[method-assign]
    app = build_app(engine, ServerOptions("llama", MODEL))
    async with TestClient(TestServer(app, **RUNNER_OPTIONS)) as client:
        await _wait_loaded(client)

        async def hog() -> None:
            while True:
                time.sleep(0.008)  # the loop does something else for 8 ms
                await asyncio.sleep(0.001)

        hogging = asyncio.create_task(hog())
        loop = asyncio.get_running_loop()
        started, before = loop.time(), len(stepped)
        body = {"model": "llama", "prompt": "x" * 40, "max_tokens": 300, "ignore_eos": True}
        response = await client.post("/v1/completions", json=body)
        wall = loop.time() - started
        hogging.cancel()
        with suppress(asyncio.CancelledError):
            await hogging
    assert response.status == 200
    assert wall == pytest.approx(sum(stepped[before:]), rel=0.1)
