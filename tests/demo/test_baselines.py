"""The simulated baselines replay the demo's own trace in virtual time."""

from __future__ import annotations

from pathlib import Path

from specops.demo import DemoOptions, baseline_policies, load_demo_trace, replay_baselines

QUIET = """
name: quiet
workload: sharegpt
segments:
  - {duration_s: 60, concurrency: 4}
"""


def test_policies_are_off_and_the_static_k() -> None:
    assert [p.name for p in baseline_policies(3)] == ["off", "static k=3"]


def test_at_low_load_speculation_beats_none_in_the_replay(tmp_path: Path) -> None:
    path = tmp_path / "quiet.yaml"
    path.write_text(QUIET)
    trace = load_demo_trace(path, 1.0)
    seen: list[str] = []
    off, static = replay_baselines(
        trace, DemoOptions(), static_k=3, k_max=5, max_num_seqs=256, progress=seen.append
    )
    assert seen == ["replaying quiet with off", "replaying quiet with static k=3"]
    assert static.summary.mean_tpot_s < off.summary.mean_tpot_s
    assert static.summary.throughput > off.summary.throughput
    assert off.summary.restarts == static.summary.restarts == 0
