"""The controlled run follows the operator's decision path, its timing included."""

from pathlib import Path

from specops_lab.bench import ControlledPolicy, LoadTrace, Segment, load_suite, run_policy

FULL = Path(__file__).resolve().parents[3] / "bench" / "full.yaml"


def test_a_rollout_is_followed_at_the_operators_pace_so_its_duration_is_the_downtime() -> None:
    """At 192 in flight on the H200 truth the controller turns speculation off within a
    window. Followed only at each window, the rollout would read as a window and more
    long, and every later restart would be priced at that."""
    suite, _ = load_suite(FULL)
    service = suite.service.model_copy(update={"truth": "llama3.1-8b-h200-eagle3"})
    trace = LoadTrace(
        name="high", workload="sharegpt", segments=(Segment(duration_s=240, concurrency=192),)
    )
    run = run_policy(trace, ControlledPolicy("specops"), service, suite.controller)
    changed = next(d for d in run.decisions if d.action == "Reconfigure")
    followed = [d for d in run.decisions if d.at > changed.at and d.code.startswith("Rollout")]
    done = next(d for d in followed if d.code == "RolloutDone")
    poll = suite.controller.rollout_poll_s
    steps = [round(b.at - a.at) for a, b in zip([changed, *followed[:-1]], followed, strict=True)]
    assert steps == [poll] * len(followed)
    assert service.restart_downtime_s <= done.at - changed.at <= service.restart_downtime_s + poll
    assert f"Ready after {service.restart_downtime_s:.0f}s" in done.reason
