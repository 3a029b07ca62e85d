"""The engine truth is an axis of the suite: each trace runs on each truth, named for it."""

from pathlib import Path

from specops_lab.bench import LoadTrace, Segment, load_suite, run_suite

FULL = Path(__file__).resolve().parents[3] / "bench" / "full.yaml"


def test_every_trace_runs_on_every_truth_and_is_named_for_it() -> None:
    suite, _ = load_suite(FULL)
    truths = ("llama3.1-8b-h100-eagle3", "llama3.1-8b-h200-eagle3")
    suite = suite.model_copy(update={"truths": truths, "policies": ("off", "k3")})
    trace = LoadTrace(
        name="tiny", workload="sharegpt", segments=(Segment(duration_s=20, concurrency=8),)
    )
    results = run_suite(suite, [trace])
    assert [r.trace.name for r in results] == [f"tiny@{t}" for t in truths]
    assert [r.truth for r in results] == list(truths)
    # the same config runs faster on the faster memory of the H200
    h100, h200 = (r.summary("k3").throughput for r in results)
    assert h200 > h100
    # the oracle's pool holds the truth's own best table beside the fixed configs
    assert all("truth-table" in r.fixed for r in results)
