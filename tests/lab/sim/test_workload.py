from pathlib import Path

import numpy as np
import pytest
from specops_lab.sim import (
    LengthDistribution,
    MixPhase,
    ParametricComponent,
    Workload,
    WorkloadSpec,
    load_trace_set,
    load_workload,
    replay,
)

from specops.errors import EngineConfigError
from specops.policy import AcceptanceCurve
from specops.profiles import DraftFamily

# lab/specops_lab/sim/traces/README.md: mean tokens per step (bonus included) of the replay rule.
README_TABLE = {
    ("sharegpt", "network"): (1.647, 2.037, 2.278, 2.436, 2.542, 2.672),
    ("sharegpt", "lookup"): (1.162, 1.240, 1.286, 1.316, 1.338, 1.368),
    ("gsm8k", "network"): (1.696, 2.134, 2.398, 2.570, 2.684, 2.791),
    ("gsm8k", "lookup"): (1.105, 1.141, 1.158, 1.166, 1.171, 1.177),
}


@pytest.mark.parametrize(("workload", "family"), sorted(README_TABLE))
def test_replay_reproduces_the_readme_table(workload: str, family: str) -> None:
    traces = load_trace_set(workload).traces(DraftFamily(family))
    for k, expected in zip((1, 2, 3, 4, 5, 7), README_TABLE[workload, family], strict=True):
        per_request = [emitted / steps for emitted, steps in (replay(t, k) for t in traces)]
        assert float(np.mean(per_request)) == pytest.approx(expected, abs=5e-4)


def test_replay_without_drafts_emits_one_token_per_step() -> None:
    assert replay([3, 1, 4, 1, 5], 0) == (5, 5)


def _parametric(rates: tuple[float, ...], prompt: int = 100) -> ParametricComponent:
    return ParametricComponent(
        network=rates,
        prompt_len=LengthDistribution(mean=prompt),
        output_len=LengthDistribution(mean=4000),
    )


def test_parametric_traces_give_the_expected_tokens_per_step() -> None:
    conditional = (0.8, 0.7, 0.6)
    spec = WorkloadSpec(name="p", components={"a": _parametric(conditional)})
    workload = Workload(spec, seed=3)
    trace = np.concatenate([workload.draw(0.0, DraftFamily.NETWORK).trace for _ in range(25)])
    curve = AcceptanceCurve(tuple(np.cumprod(conditional)))
    for k in (1, 3, 5):
        emitted, steps = replay(trace, k)
        assert emitted / steps == pytest.approx(curve.expected_tokens(k), rel=0.02)


def test_draws_are_seeded_and_reproducible() -> None:
    spec = load_workload("sharegpt")

    def draws(seed: int) -> list[tuple[int, int]]:
        workload = Workload(spec, seed=seed)
        return [
            (d.prompt_len, d.output_len)
            for d in (workload.draw(0.0, DraftFamily.NETWORK) for _ in range(20))
        ]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_the_mix_follows_its_phases() -> None:
    spec = WorkloadSpec(
        name="shift",
        components={"short": _parametric((0.5,), prompt=10), "long": _parametric((0.9,), 900)},
        phases=(
            MixPhase(start_s=0.0, weights={"short": 1.0}),
            MixPhase(start_s=60.0, weights={"long": 1.0}),
        ),
    )
    workload = Workload(spec)
    assert workload.draw(59.9, DraftFamily.NETWORK).prompt_len == 10
    assert workload.draw(60.0, DraftFamily.NETWORK).prompt_len == 900


def test_a_workload_file_loads_and_bad_keys_are_named(tmp_path: Path) -> None:
    good = tmp_path / "w.yaml"
    good.write_text(
        "name: mixed\n"
        "components:\n"
        "  chat: {kind: trace, trace: sharegpt}\n"
        "  synthetic:\n"
        "    kind: parametric\n"
        "    network: [0.8, 0.6]\n"
        "    prompt_len: {mean: 200, sigma: 0.5}\n"
        "    output_len: {mean: 300}\n"
        "phases:\n"
        "  - {start_s: 0, weights: {chat: 1}}\n"
        "  - {start_s: 30, weights: {chat: 1, synthetic: 3}}\n"
    )
    assert load_workload(str(good)).name == "mixed"
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: b\ncomponents: {a: {kind: trace, trace: sharegpt}}\n"
        "phases: [{start_s: 0, weights: {nope: 1}}]\n"
    )
    with pytest.raises(EngineConfigError, match="nope"):
        load_workload(str(bad))
    extra = tmp_path / "extra.yaml"
    extra.write_text("name: b\ncomponents: {a: {kind: trace, trace: sharegpt, speed: 2}}\n")
    with pytest.raises(EngineConfigError, match="speed"):
        load_workload(str(extra))
    with pytest.raises(EngineConfigError, match="gsm8k"):
        load_workload("no-such-workload")
