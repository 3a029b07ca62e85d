import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import specops_lab.sim
from specops_lab.sim import (
    EngineConfig,
    EngineStep,
    SimulatedEngine,
    Workload,
    load_truth,
    load_workload,
    parse_speculative_config,
    truth_names,
)

from specops.errors import EngineConfigError
from specops.policy import StepShape
from specops.profiles import DraftFamily, get_profile

TRUTH = load_truth("llama3.1-8b-h100-eagle3")


def step(batch: int, k: int, *, table: bool = False, speculative: bool = True) -> EngineStep:
    return EngineStep(batch, k, batch * 800, table=table, speculative=speculative)


def test_every_shipped_truth_loads_and_names_its_sources() -> None:
    assert {
        "additive-8b-h100",
        "llama3.1-8b-h100-eagle3",
        "llama3.1-8b-h100-longctx",
        "llama3.1-8b-h200-eagle3",
        "llama3.1-70b-h100-tp4",
    } <= set(truth_names())
    for name in truth_names():
        truth = load_truth(name)
        assert truth.name == name and truth.sources.fitted_to


def test_a_bad_field_is_refused_naming_it(tmp_path: Path) -> None:
    text = (
        Path(specops_lab.sim.__file__).parent / "truths" / "llama3.1-8b-h100-eagle3.yaml"
    ).read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("efficiency: 0.79", "efficiency: 1.7"))
    with pytest.raises(EngineConfigError, match=r"target\.efficiency"):
        load_truth(str(bad))
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("base: llama3.1-8b-h100-eagle3\nname: u\ndraft:\n  per_tokn_s: 1.0\n")
    with pytest.raises(EngineConfigError, match=r"draft\.per_tokn_s"):
        load_truth(str(unknown))
    # A derived truth under its base's name would report its results as the base's.
    nameless = tmp_path / "nameless.yaml"
    nameless.write_text("base: llama3.1-8b-h100-eagle3\njitter_sigma: 0.1\n")
    with pytest.raises(EngineConfigError, match=r"nameless\.yaml: set name"):
        load_truth(str(nameless))
    missing = tmp_path / "missing.yaml"
    missing.write_text("name: m\n")
    with pytest.raises(EngineConfigError, match="target"):
        load_truth(str(missing))
    with pytest.raises(EngineConfigError, match=r"llama3\.1-8b-h100-eagle3"):
        load_truth("no-such-truth")
    slashed = tmp_path / "slashed.yaml"
    slashed.write_text("base: llama3.1-8b-h100-eagle3\nname: team/h100\n")
    with pytest.raises(EngineConfigError, match="name: String should match pattern"):
        load_truth(str(slashed))


def test_an_infinite_value_a_missing_base_and_a_cycle_are_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    """An infinite step time would stall the engine's clock; a cycle spelled through another
    path to the same file would recurse until the name is too long for the system."""
    infinite = tmp_path / "inf.yaml"
    infinite.write_text("base: llama3.1-8b-h100-eagle3\nname: i\ntarget: {weights_s: .inf}\n")
    with pytest.raises(EngineConfigError, match=r"target\.weights_s: Input should be a finite"):
        load_truth(str(infinite))
    orphan = tmp_path / "orphan.yaml"
    orphan.write_text("base: no-such-truth\nname: o\n")
    with pytest.raises(EngineConfigError, match=r"orphan\.yaml: base: truth 'no-such-truth'"):
        load_truth(str(orphan))
    (tmp_path / "sub").mkdir()
    loop = tmp_path / "loop.yaml"
    loop.write_text("base: sub/../loop.yaml\nname: l\n")
    with pytest.raises(EngineConfigError, match="base truths form a cycle"):
        load_truth(str(loop))


def test_a_derived_truth_overrides_only_what_it_sets(tmp_path: Path) -> None:
    h200 = load_truth("llama3.1-8b-h200-eagle3")
    assert h200.target.efficiency == TRUTH.target.efficiency
    assert h200.target.weights_s == pytest.approx(TRUTH.target.weights_s * 3.35 / 4.8, rel=1e-3)
    assert h200.step_time(step(64, 3)) < TRUTH.step_time(step(64, 3))
    mine = tmp_path / "mine.yaml"
    mine.write_text("base: llama3.1-8b-h100-eagle3\nname: mine\njitter_sigma: 0.1\n")
    derived = load_truth(str(mine))
    assert derived.description == "llama3.1-8b-h100-eagle3 with its jitter_sigma changed"
    assert (
        replace(
            derived, name=TRUTH.name, description=TRUTH.description, jitter_sigma=TRUTH.jitter_sigma
        )
        == TRUTH
    )


def test_a_derived_truth_keeps_the_description_it_sets(tmp_path: Path) -> None:
    described = tmp_path / "described.yaml"
    described.write_text("base: llama3.1-8b-h100-eagle3\nname: d\ndescription: mine\n")
    assert load_truth(str(described)).description == "mine"
    # A base between two files need not name itself: the file loaded does.
    (tmp_path / "middle.yaml").write_text("base: llama3.1-8b-h100-eagle3\njitter_sigma: 0.1\n")
    top = tmp_path / "top.yaml"
    top.write_text("base: middle.yaml\nname: top\noverhead_s: 2.0e-3\n")
    assert load_truth(str(top)).name == "top"
    assert load_truth(str(top)).description == "middle.yaml with its overhead_s changed"


def test_the_additive_truth_is_the_profiles_cost_model() -> None:
    additive = load_truth("additive-8b-h100")
    profile = get_profile("llama3.1-8b-h100")
    for family, method in ((DraftFamily.NETWORK, "eagle"), (DraftFamily.LOOKUP, "ngram")):
        model = profile.cost_model(method)
        for batch, k, context, prefill in ((8, 3, 8000, 0), (0, 0, 0, 300), (64, 5, 5e4, 200)):
            shape = EngineStep(
                batch, k, int(context), prefill, 2 * prefill, speculative=True, family=family
            )
            expected = model.step_time(StepShape(batch, k, int(context) + 2 * prefill, prefill))
            assert additive.step_time(shape) == pytest.approx(expected, rel=1e-9)
        assert additive.kv_capacity(family) == profile.kv_capacity(method)


def test_a_zero_row_costs_more_than_speculation_off() -> None:
    off = TRUTH.step_time(step(200, 0, speculative=False))
    zero_row = TRUTH.step_time(step(200, 0, table=True))
    no_penalty = replace(TRUTH, table=replace(TRUTH.table, penalty_s=0.0))
    assert zero_row > off
    assert no_penalty.step_time(step(200, 0, table=True)) > off  # the draft pass alone


def test_a_table_makes_the_step_slower_than_the_same_k_without() -> None:
    for batch, k in ((1, 5), (64, 3), (128, 1)):
        assert TRUTH.step_time(step(batch, k, table=True)) > TRUTH.step_time(step(batch, k))


def test_the_knee_makes_step_time_grow_faster_than_linear_past_it() -> None:
    def forward(batch: int) -> float:
        return TRUTH.step_time(EngineStep(batch, 0, 0))

    below = forward(64) - forward(32)
    above = forward(1024) - forward(992)
    assert above > 3 * below
    rate = TRUTH.target.peak_flops * TRUTH.target.efficiency
    assert above == pytest.approx(32 * TRUTH.target.flops_per_token / rate, rel=0.05)


def test_each_draft_position_pays_a_fixed_cost_beyond_its_tokens() -> None:
    flat = replace(TRUTH, draft=replace(TRUTH.draft, per_position_s=0.0))
    extra = TRUTH.step_time(step(1, 5)) - TRUTH.step_time(step(1, 1))
    extra_flat = flat.step_time(step(1, 5)) - flat.step_time(step(1, 1))
    assert extra - extra_flat == pytest.approx(4 * TRUTH.draft.per_position_s)


def test_a_draft_network_takes_kv_capacity_and_a_lookup_does_not() -> None:
    assert TRUTH.kv_capacity(DraftFamily.NETWORK) < TRUTH.kv_capacity(None)
    assert TRUTH.kv_capacity(DraftFamily.LOOKUP) == TRUTH.kv_capacity(None)
    off = SimulatedEngine(Workload(load_workload("sharegpt")), EngineConfig(), truth=TRUTH)
    spec = parse_speculative_config(
        '{"method": "eagle3", "model": "d", "num_speculative_tokens": 3}'
    )
    eagle = SimulatedEngine(
        Workload(load_workload("sharegpt")), EngineConfig(speculative=spec), truth=TRUTH
    )
    assert eagle._spec.kv_blocks < off._spec.kv_blocks


def _durations(seed: int, slowdown: float = 1.0, steps: int = 2000) -> np.ndarray:
    engine = SimulatedEngine(
        Workload(load_workload("sharegpt")),
        EngineConfig(max_num_seqs=1),
        truth=TRUTH,
        seed=seed,
        slowdown=slowdown,
    )
    engine.add_request(prompt_tokens=10, max_tokens=10**5, ignore_eos=True)
    engine.step()
    results = [engine.step() for _ in range(steps)]
    return np.asarray([r.end - r.start for r in results])


def test_jitter_is_reproducible_by_seed_and_has_the_truths_sigma() -> None:
    first, again, other = _durations(1), _durations(1), _durations(2)
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    # context grows by one token a step: divide the trend out before measuring the spread
    trend = np.polyval(np.polyfit(np.arange(first.size), first, 1), np.arange(first.size))
    assert np.std(np.log(first / trend)) == pytest.approx(TRUTH.jitter_sigma, rel=0.1)
    assert np.mean(first / trend) == pytest.approx(1.0, abs=0.005)


def test_a_slow_pod_runs_every_step_slower_by_the_truths_factor() -> None:
    assert TRUTH.slow_pod_factor > 1
    slow = _durations(1, slowdown=TRUTH.slow_pod_factor, steps=50)
    assert slow == pytest.approx(_durations(1, steps=50) * TRUTH.slow_pod_factor)
    with pytest.raises(EngineConfigError, match="slowdown"):
        SimulatedEngine(Workload(load_workload("sharegpt")), EngineConfig(), slowdown=0)


def test_the_engine_prices_a_table_row_of_zero_above_speculation_off() -> None:
    def engine(spec: dict[str, object] | None) -> float:
        config = parse_speculative_config(None if spec is None else json.dumps(spec))
        sim = SimulatedEngine(
            Workload(load_workload("sharegpt")),
            EngineConfig(max_num_seqs=4, speculative=config),
            truth=replace(TRUTH, jitter_sigma=0.0),
        )
        for _ in range(4):
            sim.add_request(prompt_tokens=100, max_tokens=400, ignore_eos=True)
        while sim.has_work:
            sim.step()
        return sim.now

    table = {
        "method": "eagle3",
        "model": "d",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 1024, 0]],
    }
    assert engine(table) > engine(None)
