"""The HTTP face: /metrics, /v1/observation, /healthz on a real aiohttp test server."""

from collections.abc import Mapping

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families
from specops_sidecar import build_app

from specops.observation import (
    EngineMetricsSource,
    ObserverConfig,
    PodObservation,
    WindowedObserver,
)
from specops.profiles import get_profile
from tests.observation.fake_vllm import FakeVllm

CONFIG = ObserverConfig(
    namespace="ns",
    pod="p-0",
    service="llama",
    windows_s=(60.0, 300.0),
    cost_model=get_profile("llama3.1-8b-h100").network,
)


async def test_endpoints_serve_the_observation() -> None:
    engine = FakeVllm(k=3)
    engine.load(running=8)
    now = {"t": 0.0}

    async def get(url: str, params: Mapping[str, str] | None = None) -> tuple[int, str]:
        return 200, engine.page()

    sidecar = WindowedObserver(
        EngineMetricsSource("http://e:8000", get, lambda: now["t"]), CONFIG, lambda: now["t"]
    )
    for _ in range(6):
        engine.draft(1000, [800, 600, 400])
        engine.steps([8 * 2.8] * 120)
        engine.latencies([0.015] * 8, [0.02] * 120)
        now["t"] += 15.0
        await sidecar.poll()

    app = build_app(sidecar, interval_s=3600.0, clock=lambda: now["t"])
    async with TestClient(TestServer(app)) as http:
        health = await http.get("/healthz")
        assert health.status == 200
        assert (await health.json())["status"] == "ok"

        observation = PodObservation.model_validate_json(
            await (await http.get("/v1/observation")).text()
        )
        assert observation.windows[0].acceptance.mean_acceptance_length is not None

        page = await (await http.get("/metrics")).text()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(page)
            for s in family.samples
        }
        base = (("namespace", "ns"), ("pod", "p-0"), ("service", "llama"))
        key = ("specops_acceptance_length", tuple(sorted((*base, ("window", "60s")))))
        assert samples[key] == observation.windows[0].acceptance.mean_acceptance_length
        names = {name for name, _ in samples}
        for expected in (
            "specops_predicted_speedup",
            "specops_predicted_tpot_seconds",
            "specops_recommended_k",
            "specops_metrics_age_seconds",
            "specops_running_requests",
            "specops_step_time_slope_seconds_per_token",
            "specops_itl_seconds",
            "specops_source_reads_total",
        ):
            assert expected in names, expected
        assert all(dict(labels).keys() >= {"namespace", "pod", "service"} for _, labels in samples)


async def test_stale_estimates_leave_metrics_and_health_stays_up() -> None:
    engine = FakeVllm(k=2)
    engine.load(running=4)
    now = {"t": 0.0}
    dead = {"yes": False}

    async def get(url: str, params: Mapping[str, str] | None = None) -> tuple[int, str]:
        return (503, "") if dead["yes"] else (200, engine.page())

    sidecar = WindowedObserver(
        EngineMetricsSource("http://e:8000", get, lambda: now["t"]), CONFIG, lambda: now["t"]
    )
    for _ in range(3):
        engine.draft(10, [5, 2])
        now["t"] += 15.0
        await sidecar.poll()
    now["t"] += 100.0
    dead["yes"] = True
    await sidecar.poll()
    app = build_app(sidecar, interval_s=3600.0, clock=lambda: now["t"])
    async with TestClient(TestServer(app)) as http:
        page = await (await http.get("/metrics")).text()
        assert "specops_acceptance_length{" not in page
        assert (
            'specops_estimate_ok{estimate="acceptance",namespace="ns",pod="p-0",service="llama",'
            'window="300s"} 0.0' in page
        )
        assert "specops_metrics_age_seconds" in page
        health = await http.get("/healthz")
        assert health.status == 200
        assert (await health.json())["source_up"] is False
