"""Pods' wire observations to one control input: sums, mixes, and honest exclusions."""

from collections.abc import Sequence
from typing import Any

import pytest

from specops.control import (
    Action,
    ControlInput,
    ControllerState,
    ControlSettings,
    ReasonCode,
    ServiceModel,
    ServiceWindow,
    batch_distribution,
    decide,
    service_window,
)
from specops.observation import (
    CostPointObservation,
    EstimateStatus,
    PodObservation,
)
from specops.policy import (
    BatchDistribution,
    DraftCost,
    Prompts,
    SpecConfig,
    StepCostModel,
    cost_prior,
)
from tests.control.observations import pod_observation

NOW = 10_000.0


def _window(
    pods: Sequence[PodObservation], failures: Sequence[str] = (), k: int = 3, **kwargs: Any
) -> ServiceWindow:
    return service_window(
        pods,
        failures,
        window_s=300.0,
        in_force=SpecConfig.static(k),
        now=NOW,
        pods_ready=True,
        **kwargs,
    )


def test_the_load_keeps_each_batch_size_up_to_256() -> None:
    # A pod that runs 127 requests all the time reads as batch 127, not as a bucket's spread
    # (97-128 read as a mean of 112, and every step time predicted for it came 10 % short).
    running = pod_observation("a", at=NOW, running=[0, 0, 3, 3, 127, 127]).windows[0].load.running
    assert running is not None
    load = batch_distribution(running)
    assert load is not None
    assert dict(load.weights) == pytest.approx({3: 0.5, 127: 0.5})
    assert load.samples == 4  # the idle samples are not load


def test_past_256_a_bucket_is_spread_evenly_up_to_the_largest_value() -> None:
    running = pod_observation("a", at=NOW, running=[300, 300, 302, 302]).windows[0].load.running
    assert running is not None
    load = batch_distribution(running)
    assert load is not None
    # 300 and 302 lie in (296, 304], but nothing above 302 was seen
    assert dict(load.weights) == pytest.approx({b: 1 / 6 for b in range(297, 303)})


def test_an_idle_window_has_no_load() -> None:
    running = pod_observation("a", at=NOW, running=[0, 0, 0]).windows[0].load.running
    assert running is not None
    assert batch_distribution(running) is None


def test_counters_add_up_and_loads_mix_by_samples() -> None:
    a = pod_observation("a", at=NOW, running=[4] * 30, alpha=0.8, drafts=30_000)
    b = pod_observation("b", at=NOW - 5, running=[1] * 10, alpha=0.4, drafts=10_000)
    window = _window([a, b])
    assert window.available and window.reason == "Measured"
    assert window.pods_measured == 2
    observation = window.control_input
    assert observation.num_drafts == 40_000
    assert observation.accepted_per_position[0] == pytest.approx(0.8 * 30_000 + 0.4 * 10_000)
    assert observation.window_end == NOW - 5  # the oldest pod's reading dates the window
    assert observation.load is not None
    assert dict(observation.load.weights) == pytest.approx({1: 0.25, 4: 0.75})
    assert observation.load.samples == 40
    assert window.concurrency == pytest.approx((4 * 30 + 1 * 10) / 40)
    assert window.acceptance_length == pytest.approx(
        1 + sum(observation.accepted_per_position) / 40_000
    )


def test_a_pod_on_another_k_or_without_fresh_data_is_left_out_and_named() -> None:
    fresh = pod_observation("a", at=NOW, running=[4] * 20)
    other_k = pod_observation("b", at=NOW, running=[4] * 20, k=5)
    stale = pod_observation("c", at=NOW - 600, running=[4] * 20, status=EstimateStatus.STALE)
    window = _window([fresh, other_k, stale], ["d: cannot reach http://10.0.0.4:9090"])
    assert window.available
    assert window.control_input.num_drafts == 50_000
    assert "1 of 4 pods" in window.message
    for name in ("b: runs k=5", "c: estimates stale", "d: cannot reach"):
        assert name in window.message


@pytest.mark.parametrize(
    ("pods", "failures", "reason"),
    [
        ([], ["a: cannot reach http://10.0.0.1:9090"], "NoObservations"),
        (
            [pod_observation("a", at=NOW - 600, running=[4], status=EstimateStatus.STALE)],
            [],
            "MetricsStale",
        ),
        (
            [pod_observation("a", at=NOW, running=[4], status=EstimateStatus.UNKNOWN)],
            [],
            "NoData",
        ),
    ],
)
def test_nothing_usable_is_said_and_withheld(
    pods: list[PodObservation], failures: list[str], reason: str
) -> None:
    window = _window(pods, failures)
    assert not window.available
    assert window.reason == reason
    assert window.control_input.problem
    cost = StepCostModel(0.01, 0.001, 0.0, 0.0, DraftCost())
    decision = decide(
        ControllerState.initial(SpecConfig.static(3)),
        window.control_input,
        ServiceModel("eagle3", cost_prior(cost, relative_stddev=1e-3, floor_fraction=1e-3)),
        ControlSettings(),
        NOW,
    )
    assert decision.action is Action.WITHHOLD
    assert decision.code is ReasonCode.METRICS_UNAVAILABLE
    assert decision.config == SpecConfig.static(3)
    assert decision.reason == f"holding {SpecConfig.static(3).describe()}: {window.message}"


def test_a_whole_services_observation_is_named_by_the_service() -> None:
    """Read from Prometheus, the observation has no pod; mid-rollout it still runs the old k."""
    window = _window([pod_observation(None, at=NOW, running=[4] * 20, k=5)])
    assert not window.available
    assert window.message == "no usable measurements: llama: runs k=5, not the k=3 in force"


def test_context_comes_from_kv_use_over_running_requests() -> None:
    pod = pod_observation("a", at=NOW, running=[8] * 20, kv_usage=0.4)
    window = _window([pod], kv_capacity_tokens=400_000, default_context_tokens=1024.0)
    assert window.control_input.context_tokens == pytest.approx(0.4 * 400_000 / 8)
    assert _window([pod]).control_input.context_tokens == 1024.0


def test_the_kv_pool_an_engine_reports_wins_over_the_profiles() -> None:
    """On a GPU with more memory than the profile's, or another gpu_memory_utilization, the
    engine's pool is larger: the usage is a share of it, so each pod is read with its own."""
    measured = pod_observation("a", at=NOW, running=[8] * 20, kv_usage=0.4, kv_pool=800_000)
    profiled = pod_observation("b", at=NOW, running=[8] * 20, kv_usage=0.4)
    window = _window([measured, profiled], kv_capacity_tokens=400_000)
    assert window.control_input.context_tokens == pytest.approx(
        (0.4 * 800_000 / 8 + 0.4 * 400_000 / 8) / 2
    )


def test_speculation_off_has_load_and_no_acceptance() -> None:
    window = _window([pod_observation("a", at=NOW, running=[64] * 20, k=0)], k=0)
    assert window.available
    assert window.control_input.num_drafts == 0
    assert window.control_input.accepted_per_position == ()
    load = window.control_input.load
    assert load is not None and load.samples == 20
    assert (load.weights[0][0], load.max_batch) == (64, 64)


def test_without_a_cost_model_the_loop_only_follows_rollouts() -> None:
    observation = ControlInput(
        window_end=NOW,
        load=BatchDistribution.constant(4),
        context_tokens=0,
        num_drafts=0,
        accepted_per_position=(),
        window_s=60.0,
    )
    state = ControllerState.initial(SpecConfig.static(3))
    decision = decide(state, observation, None, ControlSettings(), NOW)
    assert (decision.action, decision.code) == (Action.WITHHOLD, ReasonCode.NO_COST_MODEL)


def test_step_points_whose_counters_contradict_the_config_are_left_out() -> None:
    drafting = CostPointObservation(
        batched_tokens=32, step_seconds=0.01, steps=100, batch=8, drafted_tokens=24, drafts=8, end=1
    )
    silent = CostPointObservation(
        batched_tokens=8, step_seconds=0.01, steps=100, batch=8, drafted_tokens=0, drafts=0, end=2
    )
    pod = pod_observation("a", at=NOW, running=[8] * 30, cost_points=[drafting, silent])
    points = _window([pod]).control_input.cost_points
    # k = 3 in force: both count (no drafts is what a k = 0 row of a table does)
    assert [p.end for p in points] == [1, 2]
    assert points[0].positions == pytest.approx(3.0) and points[0].speculating == 1.0
    off = pod_observation("a", at=NOW, running=[8] * 30, k=0, cost_points=[drafting, silent])
    # speculation off: drafts cannot happen, the interval is broken
    assert [p.end for p in _window([off], k=0).control_input.cost_points] == [2]


def test_steps_count_as_drafting_by_the_requests_that_decoded_not_those_running() -> None:
    # Load ramping up: 10 requests running on average, only 6 of them decoding (the rest
    # still prefilling), each of those drafting: every step drafted.
    ramp = CostPointObservation(
        batched_tokens=40.0,
        step_seconds=0.01,
        steps=100,
        batch=10,
        drafted_tokens=18,
        drafts=6,
        decoding=6,
        end=NOW - 10,
    )
    # A k = 0 row of a per-batch-size table: requests decode, none drafts.
    zero_row = CostPointObservation(
        batched_tokens=150.0, step_seconds=0.01, steps=100, batch=150, decoding=150, end=NOW - 8
    )
    # A sidecar that does not report the decoding requests: the running ones stand in.
    legacy = CostPointObservation(
        batched_tokens=40.0,
        step_seconds=0.01,
        steps=100,
        batch=10,
        drafted_tokens=18,
        drafts=6,
        end=NOW - 6,
    )
    pod = pod_observation("a", at=NOW, running=[10] * 30, cost_points=[ramp, zero_row, legacy])
    points = _window([pod]).control_input.cost_points
    assert [p.speculating for p in points] == pytest.approx([1.0, 0.0, 0.6])
    assert [p.positions for p in points] == pytest.approx([3.0, 0.0, 1.8])


def test_the_engines_counts_are_summed_not_a_sidecars_corrected_shares() -> None:
    # Under a table a sidecar divides each position by the drafts that reached it; the
    # controller makes that correction itself, from the engine's counts, once.
    pod = pod_observation("a", at=NOW, running=[20] * 30, alpha=0.8, drafts=10_000)
    window = pod.windows[0]
    corrected = window.acceptance.model_copy(
        update={"per_position": [0.8, 0.64, 0.512], "accepted_per_position": [8000, 2560, 2048]}
    )
    pod = pod.model_copy(update={"windows": [window.model_copy(update={"acceptance": corrected})]})
    observation = _window([pod]).control_input
    assert observation.accepted_per_position == (8000, 2560, 2048)


def test_prompt_tokens_per_output_token_and_per_request_come_from_the_pods_counters() -> None:
    def with_prompts(pod: str, prompt: float, output: float, requests: float) -> PodObservation:
        observation = pod_observation(pod, at=NOW, running=[8] * 30, tokens_per_second=output)
        window = observation.windows[0]
        outcome = window.outcome.model_copy(
            update={"prompt_tokens_per_second": prompt, "requests_per_second": requests}
        )
        return observation.model_copy(
            update={"windows": [window.model_copy(update={"outcome": outcome})]}
        )

    pods = [with_prompts("a", 300.0, 1000.0, 1.0), with_prompts("b", 900.0, 1000.0, 2.0)]
    prompts = _window(pods).control_input.prompts
    assert prompts.per_output_token == pytest.approx(0.6)
    assert prompts.mean_tokens == pytest.approx(400.0)
    # A pod that counts no finished request adds to the share, not to a prompt's length.
    uncounted = [*pods, with_prompts("c", 600.0, 1000.0, 0.0)]
    prompts = _window(uncounted).control_input.prompts
    assert prompts.per_output_token == pytest.approx(0.6)
    assert prompts.mean_tokens == pytest.approx(400.0)
    assert _window([pod_observation("a", at=NOW, running=[8] * 30)]).control_input.prompts == (
        Prompts()
    )


def test_the_pods_tpot_histograms_add_up_request_by_request() -> None:
    """Each pod's share of requests under each bound, weighed by its requests; a pod from
    a sidecar that sends no buckets adds nothing (the mean TPOT still counts it)."""
    a = pod_observation("a", at=NOW, running=[4] * 10, tpot_s=0.02, tpot_below=(0.0, 0.9, 1.0))
    b = pod_observation("b", at=NOW, running=[4] * 10, tpot_s=0.03, tpot_below=(0.0, 0.5, 1.0))
    old = pod_observation("c", at=NOW, running=[4] * 10, tpot_s=0.04)
    histogram = _window([a, b, old]).control_input.tpot_histogram
    assert histogram is not None
    assert histogram.bounds == (0.01, 0.025, 0.05)
    assert histogram.cumulative == pytest.approx((0.0, 1400.0, 2000.0))
    assert histogram.count == 2000 and histogram.mean_s == pytest.approx(0.025)
    assert _window([old]).control_input.tpot_histogram is None
