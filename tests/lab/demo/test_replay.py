"""The report's comparison replays the demo's day in virtual time for every policy, with the
demo's service and controller settings, on one truth."""

from __future__ import annotations

from pathlib import Path

import pytest
from specops_lab.bench import LoadTrace, Segment
from specops_lab.demo import DemoOptions, demo_suite, load_demo_trace, replay_day, sliced

from specops.control import ControlSettings
from specops.profiles import PRIOR_ACCEPTANCE, DraftFamily

QUIET = """
name: quiet
workload: sharegpt
segments:
  - {duration_s: 50, concurrency: 4, label: night}
"""


def test_the_suite_is_the_benchmarks_with_the_demos_service_and_controller() -> None:
    options = DemoOptions(window_s=40, dwell_s=60)
    suite = demo_suite(options, initial_k=3, k_max=5, max_num_seqs=256, per_batch_size=False)
    service, controller = suite.service, suite.controller
    assert (service.profile, service.truth) == (options.profile, options.truth)
    assert (service.k_max, service.initial_k, service.max_num_seqs) == (5, 3, 256)
    assert service.restart_downtime_s == options.restart_cost_s
    assert service.tpot_target_ms == options.tpot_target_ms
    assert service.per_batch_size is False
    assert service.prior_acceptance == PRIOR_ACCEPTANCE[DraftFamily.NETWORK]
    assert (controller.window_s, controller.min_dwell_s) == (40, 60)
    assert controller.min_gain == pytest.approx(options.min_gain_percent / 100)
    assert controller.max_reconfigurations_per_hour == options.max_reconfigurations_per_hour
    loop = ControlSettings()  # what the operator uses where the demo's service sets nothing
    assert (controller.margin, controller.regime_min_s) == (loop.margin, loop.regime_min_s)
    assert suite.policies is None  # every policy


def test_slices_cut_flat_stretches_and_keep_ramps_and_labels() -> None:
    trace = LoadTrace(
        name="t",
        workload="sharegpt",
        segments=(
            Segment(duration_s=70, concurrency=4, label="night"),
            Segment(duration_s=30, concurrency=4, to=200),
            Segment(duration_s=30, concurrency=200, label="midday"),
        ),
    )
    cut = sliced(trace, 30.0)
    assert [s.label for s in cut.segments] == ["night"] * 3 + ["1:c4->200", "midday"]
    assert [s.duration_s for s in cut.segments] == pytest.approx([70 / 3] * 3 + [30, 30])
    assert cut.duration_s == pytest.approx(trace.duration_s)
    assert cut.segments[3].to == 200


def test_every_policy_replays_the_day_on_one_truth(tmp_path: Path) -> None:
    path = tmp_path / "quiet.yaml"
    path.write_text(QUIET)
    trace = load_demo_trace(path, 50 / 60)
    seen: list[str] = []
    replay = replay_day(
        trace, DemoOptions(), initial_k=3, k_max=5, max_num_seqs=256, progress=seen.append
    )
    names = set(replay.policies())
    assert {"off", "k1", "k5", "vllm-table", "turbospec", "specops", "oracle"} <= names
    assert len(seen) == len(names) - 1  # each run announced; the oracle is computed
    assert replay.truth == DemoOptions().truth
    assert replay.phases() == ("night",)
    assert len(replay.segments("specops")) == 2  # 50 s cut into two slices
    assert replay.best_static in replay.statics
    assert replay.baselines == ("off", replay.best_static, "vllm-table", "oracle")
    # At four requests in flight every k beats none, and the oracle is at least as good.
    off, best = replay.summary("off"), replay.summary(replay.best_static)
    assert best.goodput > off.goodput and best.mean_tpot_s < off.mean_tpot_s
    assert replay.summary("oracle").goodput >= best.goodput
    night = replay.phase_summary("specops", "night")
    assert night.throughput == pytest.approx(replay.summary("specops").throughput)
