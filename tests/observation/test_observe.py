"""Whole observations from a fake engine driven with a known truth."""

import pytest

from specops.observation import (
    EstimateStatus,
    ObserverConfig,
    PodObservation,
    Snapshot,
    SourceObservation,
    observe,
    parse_exposition,
    prior_from_model,
    snapshot_from_reading,
)
from specops.policy import StepShape
from specops.profiles import get_profile

from .fake_vllm import FakeVllm

MODEL = get_profile("llama3.1-8b-h100").network
K = 3
RATES = (0.8, 0.6, 0.45)  # true a_i
SOURCE = SourceObservation(kind="direct", target="http://engine:8000/metrics", up=True)
CONTEXT = 1024.0


def config(**overrides: object) -> ObserverConfig:
    values: dict[str, object] = {
        "namespace": "ns", "pod": "p-0", "service": "svc", "windows_s": (60.0, 300.0),
        "prediction_window_s": 300.0, "cost_model": MODEL, "context_tokens_per_request": CONTEXT,
    }  # fmt: skip
    values.update(overrides)
    return ObserverConfig(**values)  # type: ignore[arg-type]


def true_step_seconds(batch: int) -> float:
    return MODEL.step_time(StepShape(batch, K, round(batch * CONTEXT)))


def drive(engine: FakeVllm, batches: list[int], start: float = 0.0) -> list[Snapshot]:
    """One reading every 15 s; between readings the engine runs at the given batch."""
    snaps = [snapshot_from_reading(parse_exposition(engine.page(), start))]
    for i, batch in enumerate(batches):
        steps = round(15.0 / true_step_seconds(batch))
        drafts = steps * batch
        accepted = [round(drafts * r) for r in RATES]
        engine.draft(drafts, accepted)
        engine.steps([(drafts + sum(accepted)) / steps] * steps)
        engine.load(running=batch, waiting=1, kv=0.5)
        engine.preempt(1)
        engine.latencies([0.02] * batch, [0.03] * steps)
        engine.finish(batch)
        snaps.append(snapshot_from_reading(parse_exposition(engine.page(), start + 15.0 * (i + 1))))
    return snaps


def test_estimates_match_the_engine_truth() -> None:
    engine = FakeVllm(k=K)
    engine.load(running=8)
    batches = [8, 8, 16, 16, 32, 32, 4, 4, 8, 8]
    snaps = drive(engine, batches)
    obs = observe(snaps, now=snaps[-1].timestamp, config=config(), source=SOURCE)
    assert obs.status is EstimateStatus.OK
    assert obs.configured_k == K
    window = obs.windows[1]
    assert window.readings == 11
    acceptance = window.acceptance
    assert acceptance.status is EstimateStatus.OK
    assert acceptance.per_position == pytest.approx(RATES, abs=1e-3)
    assert acceptance.mean_acceptance_length == pytest.approx(1 + sum(RATES), abs=1e-3)
    assert acceptance.acceptance_rate == pytest.approx(sum(RATES) / K, abs=1e-3)
    assert acceptance.expected_tokens[2].tokens == pytest.approx(1 + RATES[0] + RATES[1], abs=1e-3)
    running = window.load.running
    assert running is not None
    assert running.max == 32 and running.p50 == 8
    assert window.load.preemptions_per_second == pytest.approx(1 / 15)
    cost = window.cost
    assert cost.status is EstimateStatus.OK and cost.fit is not None
    for point in cost.points:
        batch = round(point.batched_tokens / (K + 1))
        assert point.step_seconds == pytest.approx(true_step_seconds(batch), rel=0.01)
    for batch in (4, 16, 32):
        assert cost.fit.intercept_seconds + cost.fit.slope_seconds_per_token * batch * (
            K + 1
        ) == pytest.approx(true_step_seconds(batch), rel=0.01)
    outcome = window.outcome
    assert outcome.itl is not None and outcome.tpot is not None
    assert 0.025 <= outcome.itl.p50_seconds <= 0.05
    assert 0.01 <= outcome.tpot.p50_seconds <= 0.025
    # every request took 20 ms: none at or below the 10 ms bound, all at or below 25 ms
    assert outcome.tpot.bounds[:2] == [0.01, 0.025]
    assert outcome.tpot.cumulative_fractions[:2] == [0.0, 1.0]
    assert outcome.output_tokens_per_second == pytest.approx(
        sum(round(15.0 / true_step_seconds(b)) * b * (1 + sum(RATES)) for b in batches)
        / (10 * 15.0),
        rel=1e-3,
    )


def test_windows_only_see_their_own_readings() -> None:
    engine = FakeVllm(k=K)
    engine.load(running=8)
    snaps = drive(engine, [4] * 10 + [32] * 4)
    obs = observe(snaps, now=snaps[-1].timestamp, config=config(), source=SOURCE)
    short, long = obs.windows
    assert short.load.running is not None and long.load.running is not None
    assert short.load.running.p50 == 32
    assert long.load.running.p50 == 4


def test_prediction_uses_the_policy_at_the_observed_load() -> None:
    engine = FakeVllm(k=K)
    engine.load(running=8)
    snaps = drive(engine, [8] * 10)
    obs = observe(snaps, now=snaps[-1].timestamp, config=config(max_k=5), source=SOURCE)
    prediction = obs.prediction
    assert prediction.status is EstimateStatus.OK
    assert [c.k for c in prediction.candidates] == [0, 1, 2, 3, 4, 5]
    assert prediction.candidates[0].predicted_speedup == 1.0
    assert prediction.mean_batch == 8
    assert all(c.predicted_speedup > 1 for c in prediction.candidates[1:])  # memory-bound at B=8
    assert all(c.crossover_batch is None or c.crossover_batch > 8 for c in prediction.candidates)


def test_crossovers_reach_the_engines_batch_limit() -> None:
    engine = FakeVllm(k=K)
    engine.load(running=8)
    snaps = drive(engine, [8] * 10)
    # A prior under which drafting stops paying past a few hundred requests in a batch.
    prior = get_profile("llama3.1-70b-h100-tp4").cost_model("eagle3")

    def crossovers(max_batch: int) -> dict[int, int | None]:
        settings = config(max_batch=max_batch, cost_model=prior)
        obs = observe(snaps, snaps[-1].timestamp, settings, SOURCE)
        return {c.k: c.crossover_batch for c in obs.prediction.candidates}

    narrow, wide = crossovers(256), crossovers(1024)
    assert all(b is None or b <= 256 for b in narrow.values())
    # A k that still pays at 256 has its crossover found further out, below the wider limit.
    beyond = [k for k, b in narrow.items() if k > 0 and b is None and wide[k] is not None]
    assert beyond, (narrow, wide)
    assert all(256 < (wide[k] or 0) <= 1024 for k in beyond)


def test_a_dead_source_turns_estimates_stale_then_unknown() -> None:
    engine = FakeVllm(k=K)
    engine.load(running=8)
    snaps = drive(engine, [8] * 6)
    last = snaps[-1].timestamp
    stale = observe(snaps, now=last + 50, config=config(), source=SOURCE)
    assert stale.status is EstimateStatus.STALE
    assert stale.windows[1].acceptance.status is EstimateStatus.STALE
    assert stale.windows[1].acceptance.mean_acceptance_length is not None
    gone = observe(snaps, now=last + 400, config=config(), source=SOURCE)
    for window in gone.windows:
        assert window.acceptance.status is EstimateStatus.UNKNOWN
        assert window.acceptance.mean_acceptance_length is None
    assert gone.prediction.status is EstimateStatus.UNKNOWN


def test_no_readings_and_one_reading_are_unknown() -> None:
    empty = observe([], now=0.0, config=config(), source=SOURCE)
    assert empty.status is EstimateStatus.UNKNOWN
    engine = FakeVllm(k=K)
    one = observe(drive(engine, []), now=1.0, config=config(), source=SOURCE)
    assert one.windows[0].acceptance.status is EstimateStatus.UNKNOWN
    assert "fewer than two readings" in one.windows[0].acceptance.reason


def test_a_restart_inside_the_window_neither_loses_nor_invents_drafts() -> None:
    old = FakeVllm(k=K)
    old.load(running=8)
    before = drive(old, [8] * 3)
    new = FakeVllm(k=K)
    new.load(running=8)
    after = drive(new, [8] * 3, start=before[-1].timestamp + 15)
    snaps = before + after
    obs = observe(snaps, now=snaps[-1].timestamp, config=config(), source=SOURCE)
    window = obs.windows[1]
    assert window.resets == 1
    drafts_per_interval = round(15.0 / true_step_seconds(8)) * 8
    # 3 intervals before, the restart interval (counted from zero: nothing yet), 3 after.
    assert window.acceptance.drafts == 6 * drafts_per_interval
    assert window.acceptance.per_position == pytest.approx(RATES, abs=1e-3)
    assert len(window.cost.points) == 6  # of 7 intervals: the restart one has no step time


def test_a_missing_series_shortens_its_time_instead_of_reading_as_zero() -> None:
    engine = FakeVllm(k=K)
    engine.load(running=8)
    snaps = drive(engine, [8] * 6)
    holed = [
        Snapshot(s.timestamp, s.engines, {}, (), s.histograms, s.gauges) if i == 3 else s
        for i, s in enumerate(snaps)
    ]
    full = observe(snaps, now=snaps[-1].timestamp, config=config(), source=SOURCE)
    gapped = observe(holed, now=snaps[-1].timestamp, config=config(), source=SOURCE)
    tokens = gapped.windows[1].outcome.output_tokens_per_second
    assert tokens == pytest.approx(full.windows[1].outcome.output_tokens_per_second)
    assert gapped.windows[1].acceptance.per_position == pytest.approx(RATES, abs=1e-3)


def test_without_a_profile_there_is_no_fit_and_no_prediction() -> None:
    engine = FakeVllm(k=K)
    engine.load(running=8)
    snaps = drive(engine, [8] * 4)
    obs = observe(snaps, now=snaps[-1].timestamp, config=config(cost_model=None), source=SOURCE)
    assert obs.windows[1].cost.fit is None
    assert obs.windows[1].cost.step_seconds is not None
    assert obs.prediction.status is EstimateStatus.UNKNOWN


def test_observation_round_trips_through_json() -> None:
    engine = FakeVllm(k=K)
    engine.load(running=8)
    snaps = drive(engine, [8] * 4)
    obs = observe(snaps, now=snaps[-1].timestamp, config=config(), source=SOURCE)
    assert PodObservation.model_validate_json(obs.model_dump_json()) == obs


def test_prior_is_reported_next_to_the_fit() -> None:
    engine = FakeVllm(k=K)
    engine.load(running=8)
    obs = observe(drive(engine, [8] * 3), now=45.0, config=config(), source=SOURCE)
    prior = prior_from_model(MODEL, K, CONTEXT)
    assert obs.windows[0].cost.prior is not None
    assert obs.windows[0].cost.prior.intercept_seconds == pytest.approx(prior.intercept_s)


def test_config_rejects_a_prediction_window_it_does_not_compute() -> None:
    with pytest.raises(ValueError, match="prediction window"):
        config(prediction_window_s=42.0)
