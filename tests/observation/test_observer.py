"""The windowed observer, the polling shell the sidecar and the operator share, over a fake
GET: failures logged once per cause, stale then unknown, recovery."""

import logging
from collections.abc import Mapping

import pytest

from specops.errors import MetricsError
from specops.observation import (
    EngineMetricsSource,
    EstimateStatus,
    ObserverConfig,
    OncePerCause,
    WindowedObserver,
)
from tests.observation.fake_vllm import FakeVllm

CONFIG = ObserverConfig(
    namespace="ns", pod="p-0", service="s", windows_s=(60.0, 300.0), stale_after_s=45.0
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FlakyEngine:
    """The engine page, or a chosen failure."""

    def __init__(self) -> None:
        self.engine = FakeVllm(k=2)
        self.engine.load(running=4)
        self.failure: str | None = None

    def work(self) -> None:
        self.engine.draft(100, [70, 40])
        self.engine.steps([4 * 2.1] * 25)

    async def __call__(self, url: str, params: Mapping[str, str] | None = None) -> tuple[int, str]:
        """The GET the observer's source reads through."""
        assert url == "http://e:8000/metrics" and params is None
        if self.failure == "refused":
            raise MetricsError(f"cannot reach {url}: ConnectError: connection refused")
        if self.failure == "garbage":
            return 200, 'vllm:num_requests_running{engine="0 1\n'
        return 200, self.engine.page()


def make(clock: Clock, flaky: FlakyEngine) -> WindowedObserver:
    return WindowedObserver(EngineMetricsSource("http://e:8000", flaky, clock), CONFIG, clock)


async def run(observer: WindowedObserver, clock: Clock, flaky: FlakyEngine, polls: int) -> None:
    for _ in range(polls):
        flaky.work()
        clock.now += 15.0
        await observer.poll()


async def test_failures_are_logged_once_per_cause_and_recovery_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, flaky = Clock(), FlakyEngine()
    observer = make(clock, flaky)
    caplog.set_level(logging.INFO, logger="specops.observation")
    await run(observer, clock, flaky, 3)
    flaky.failure = "refused"
    await run(observer, clock, flaky, 5)
    flaky.failure = "garbage"
    await run(observer, clock, flaky, 5)
    flaky.failure = None
    await run(observer, clock, flaky, 3)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages
    assert "cannot reach" in messages[0]
    assert "malformed metric page" in messages[1]
    assert "recovered" in messages[2]
    assert observer.counts.reads_failed == 10
    assert observer.counts.reads_ok == 6


async def test_a_dead_engine_makes_estimates_stale_then_unknown_then_they_recover() -> None:
    clock, flaky = Clock(), FlakyEngine()
    observer = make(clock, flaky)
    await run(observer, clock, flaky, 6)
    fresh = observer.observation
    assert fresh.status is EstimateStatus.OK and fresh.source.up
    assert fresh.windows[0].acceptance.per_position == pytest.approx([0.7, 0.4])

    flaky.failure = "refused"
    await run(observer, clock, flaky, 4)  # 60 s without a reading
    stale = observer.observation
    assert not stale.source.up and "cannot reach" in stale.source.error
    assert stale.status is EstimateStatus.STALE
    assert stale.windows[1].acceptance.status is EstimateStatus.STALE
    assert stale.windows[0].acceptance.status is EstimateStatus.UNKNOWN

    await run(observer, clock, flaky, 20)  # 5 more minutes: nothing left in any window
    assert all(w.acceptance.status is EstimateStatus.UNKNOWN for w in observer.observation.windows)

    flaky.failure = None
    await run(observer, clock, flaky, 3)
    back = observer.observation
    assert back.status is EstimateStatus.OK and back.source.up
    assert back.windows[0].acceptance.status is EstimateStatus.OK


async def test_history_is_trimmed_to_the_longest_window() -> None:
    clock, flaky = Clock(), FlakyEngine()
    observer = make(clock, flaky)
    await run(observer, clock, flaky, 100)
    assert observer.observation.windows[1].readings == 20


def test_once_per_cause_ignores_changing_details(caplog: pytest.LogCaptureFixture) -> None:
    problems = OncePerCause(logging.getLogger("t"))
    caplog.set_level(logging.INFO, logger="t")
    for line in range(5):
        problems.failed(ValueError(f"malformed metric page: bad line {line}"))
    problems.succeeded()
    problems.succeeded()
    assert len(caplog.records) == 2
