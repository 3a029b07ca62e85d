"""Estimates against the simulated engine's known truth, in virtual time (no processes).

The workload fixes the per-position conditional acceptance, so E(k) is known for every
k; the engine's steps take the profile's step time, and each StepResult says how long
it took, so the measured step time has an exact reference.
"""

import dataclasses

import pytest
from specops_lab.sim import (
    EngineConfig,
    LengthDistribution,
    ParametricComponent,
    SimulatedEngine,
    Workload,
    WorkloadSpec,
    load_truth,
    parse_speculative_config,
)
from specops_lab.sim._exposition import render_metrics

from specops.control import service_window
from specops.observation import (
    EstimateStatus,
    ObserverConfig,
    PodObservation,
    Snapshot,
    SourceObservation,
    observe,
    parse_exposition,
    snapshot_from_reading,
)
from specops.policy import SpecConfig, StepShape
from specops.profiles import get_profile
from specops.vllm import SpeculativeConfig

CONDITIONAL = (0.85, 0.75, 0.7)  # the last rate repeats past position 2
K = 3
CONCURRENCY = 12
PROFILE = get_profile("llama3.1-8b-h100")
SOURCE = SourceObservation(kind="direct", target="sim", up=True)
SPEC = WorkloadSpec(
    name="fixed",
    components={
        "only": ParametricComponent(
            network=CONDITIONAL,
            prompt_len=LengthDistribution(mean=200),
            output_len=LengthDistribution(mean=300),
        )
    },
)


def true_expected(k: int) -> float:
    total, rate = 1.0, 1.0
    for i in range(k):
        rate *= CONDITIONAL[min(i, len(CONDITIONAL) - 1)]
        total += rate
    return total


@dataclasses.dataclass(frozen=True)
class Run:
    snapshots: list[Snapshot]
    step_seconds: list[float]


@pytest.fixture(scope="module")
def run() -> Run:
    """Closed loop at fixed concurrency for 150 virtual seconds, read every 15 s."""
    config = EngineConfig(
        served_model_name="m",
        speculative=parse_speculative_config(
            f'{{"method": "eagle", "model": "d", "num_speculative_tokens": {K}}}'
        ),
    )
    # The additive truth is the profile's own cost model: the fit can recover it exactly.
    engine = SimulatedEngine(Workload(SPEC, seed=1), config, truth=load_truth("additive-8b-h100"))
    for _ in range(CONCURRENCY):
        engine.add_request()
    snapshots: list[Snapshot] = []
    steps: list[float] = []
    next_reading = 0.0
    while engine.now < 150.0:
        if engine.now >= next_reading:
            page = render_metrics(engine.metrics(), "m", speculative=True).decode()
            snapshots.append(snapshot_from_reading(parse_exposition(page, engine.now)))
            next_reading += 15.0
        result = engine.step()
        steps.append(result.end - result.start)
        for _ in result.finished:
            engine.add_request()
    return Run(snapshots, steps)


def observation(snapshots: list[Snapshot], prior_scale: float = 1.0) -> PodObservation:
    model = PROFILE.cost_model("eagle")
    prior_model = dataclasses.replace(
        model, t_fixed=model.t_fixed * prior_scale, c_tok=model.c_tok * prior_scale
    )
    config = ObserverConfig(
        namespace="ns",
        pod="p",
        service="s",
        windows_s=(300.0,),
        prediction_window_s=300.0,
        cost_model=prior_model,
        context_tokens_per_request=350.0,
        method="eagle",
    )
    return observe(snapshots, snapshots[-1].timestamp, config, SOURCE)


def test_expected_tokens_match_the_workloads_acceptance(run: Run) -> None:
    acceptance = observation(run.snapshots).windows[0].acceptance
    assert acceptance.status is EstimateStatus.OK
    for e in acceptance.expected_tokens:
        assert abs(e.tokens - true_expected(e.k)) <= 3 * e.stderr + 1e-9, e
        assert e.tokens == pytest.approx(true_expected(e.k), rel=0.02)
    assert acceptance.mean_acceptance_length == pytest.approx(true_expected(K), rel=0.01)


def test_step_time_matches_the_engines_steps(run: Run) -> None:
    cost = observation(run.snapshots).windows[0].cost
    assert cost.status is EstimateStatus.OK
    true_mean = sum(run.step_seconds) / len(run.step_seconds)
    assert cost.step_seconds == pytest.approx(true_mean, rel=0.02)


def test_fit_moves_from_a_wrong_prior_to_the_measured_step_time(run: Run) -> None:
    cost = observation(run.snapshots, prior_scale=0.6).windows[0].cost
    assert cost.fit is not None and cost.prior is not None
    n = cost.batched_tokens_per_step
    assert n is not None
    batch = round(n / (K + 1))
    truth = PROFILE.cost_model("eagle").step_time(StepShape(batch, K, batch * 350))
    prior_at_n = cost.prior.intercept_seconds + cost.prior.slope_seconds_per_token * n
    fitted_at_n = cost.fit.intercept_seconds + cost.fit.slope_seconds_per_token * n
    assert abs(prior_at_n - truth) / truth > 0.2
    assert fitted_at_n == pytest.approx(truth, rel=0.05)
    assert fitted_at_n == pytest.approx(cost.step_seconds, rel=0.02)


TABLE = "[[1, 16, 3], [17, 64, 1]]"


@pytest.fixture(scope="module")
def table_run() -> list[Snapshot]:
    """A per-batch-size table drafting 3 up to batch 16 and 1 above, under a load that
    moves between 8 and 24 running requests every 30 s; read every 5 s for 300 s."""
    config = EngineConfig(
        served_model_name="m",
        speculative=parse_speculative_config(
            f'{{"method": "eagle", "model": "d", "num_speculative_tokens": {K}, '
            f'"num_speculative_tokens_per_batch_size": {TABLE}}}'
        ),
    )
    engine = SimulatedEngine(Workload(SPEC, seed=2), config, truth=load_truth("additive-8b-h100"))
    snapshots: list[Snapshot] = []
    next_reading = 0.0
    in_flight = 0
    while engine.now < 300.0:
        wanted = 8 if int(engine.now // 30) % 2 == 0 else 24
        while in_flight < wanted:
            engine.add_request()
            in_flight += 1
        if engine.now >= next_reading:
            page = render_metrics(engine.metrics(), "m", speculative=True).decode()
            snapshots.append(snapshot_from_reading(parse_exposition(page, engine.now)))
            next_reading += 5.0
        in_flight -= len(engine.step().finished)
    return snapshots


def table_acceptance(snapshots: list[Snapshot], speculation: str | None) -> PodObservation:
    config = ObserverConfig(
        namespace="ns",
        pod="p",
        service="s",
        windows_s=(300.0,),
        prediction_window_s=300.0,
        cost_model=PROFILE.cost_model("eagle"),
        context_tokens_per_request=350.0,
        method="eagle",
        speculation=SpeculativeConfig.from_json(speculation).in_force() if speculation else None,
    )
    return observe(snapshots, snapshots[-1].timestamp, config, SOURCE)


def test_a_tables_short_drafts_are_corrected_for_with_the_config_in_force(
    table_run: list[Snapshot],
) -> None:
    truth = [true_expected(i + 1) - true_expected(i) for i in range(K)]
    raw = table_acceptance(table_run, None).windows[0].acceptance
    speculative = f'{{"method": "eagle", "model": "d", "num_speculative_tokens": {K}, '
    speculative += f'"num_speculative_tokens_per_batch_size": {TABLE}}}'
    corrected = table_acceptance(table_run, speculative).windows[0].acceptance
    assert raw.per_position[0] == pytest.approx(truth[0], rel=0.03)
    # Read over all drafts, the positions only small batches draft look far worse.
    assert raw.per_position[1] < 0.8 * truth[1] and raw.per_position[2] < 0.8 * truth[2]
    assert corrected.per_position == pytest.approx(truth, rel=0.06)
    assert corrected.accepted_per_position == raw.accepted_per_position
    e3 = corrected.expected_tokens[K]
    assert e3.measured and abs(e3.tokens - true_expected(K)) <= 3 * e3.stderr + 0.02
    prediction = table_acceptance(table_run, speculative).prediction
    assert prediction.candidates[K].expected_tokens == pytest.approx(true_expected(K), rel=0.03)


@pytest.mark.parametrize("truth", ["llama3.1-8b-h100-eagle3", "llama3.1-8b-h200-eagle3"])
def test_context_is_read_against_the_kv_pool_the_engine_sized(truth: str) -> None:
    """The KV-cache usage is a share of the engine's own pool, which the GPU (the H200's
    is twice the H100's) and its settings decide: read against the profile's H100 pool,
    the context per request on the H200 would come out at half of what the requests hold.
    Read against the pool cache_config_info reports, it is the workload's on both."""
    config = EngineConfig(
        served_model_name="m",
        speculative=parse_speculative_config(
            f'{{"method": "eagle3", "model": "d", "num_speculative_tokens": {K}}}'
        ),
    )
    engine = SimulatedEngine(Workload(SPEC, seed=3), config, truth=load_truth(truth))
    for _ in range(32):
        engine.add_request()
    snapshots: list[Snapshot] = []
    held: list[float] = []
    while engine.now < 120.0:
        if engine.now >= 5.0 * len(snapshots):
            page = render_metrics(engine.metrics(), "m", speculative=True).decode()
            snapshots.append(snapshot_from_reading(parse_exposition(page, engine.now)))
            held.append(engine.context_tokens / max(engine.num_running, 1))
        for _ in engine.step().finished:
            engine.add_request()
    pod = observation(snapshots)
    window = service_window(
        [pod],
        [],
        window_s=300.0,
        in_force=SpecConfig.static(K),
        now=snapshots[-1].timestamp,
        pods_ready=True,
        kv_capacity_tokens=PROFILE.kv_capacity("eagle3"),
    )
    assert window.control_input.context_tokens == pytest.approx(sum(held) / len(held), rel=0.1)
