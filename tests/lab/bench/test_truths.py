"""The engine truth is an axis of the suite: each trace runs on each truth, named for it."""

from pathlib import Path

import pytest
from specops_lab.bench import BenchError, LoadTrace, Segment, load_suite, run_suite
from specops_lab.bench._plots import plot_all

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


def test_a_truth_file_names_its_results_and_plots_by_its_own_name(tmp_path: Path) -> None:
    """A truth given as a file (the benchmark is run on truths not shipped) labels its rows
    and plot files by its ``name``, not by its path; two truths of one name are refused."""
    mine = tmp_path / "truths" / "slow-host.yaml"
    mine.parent.mkdir()
    mine.write_text(
        "base: llama3.1-8b-h100-eagle3\nname: h100-slow-host\nverify: {per_token_s: 5.4e-5}\n"
    )
    suite, _ = load_suite(FULL)
    suite = suite.model_copy(
        update={"truths": ("llama3.1-8b-h100-eagle3", str(mine)), "policies": ("off", "k3")}
    )
    trace = LoadTrace(
        name="tiny", workload="sharegpt", segments=(Segment(duration_s=20, concurrency=8),)
    )
    results = run_suite(suite, [trace])
    assert [r.trace.name for r in results] == [
        "tiny@llama3.1-8b-h100-eagle3",
        "tiny@h100-slow-host",
    ]
    assert results[1].truth == "h100-slow-host"
    written = plot_all(results, tmp_path)
    assert [p.name for p in written][1] == "tiny@h100-slow-host-k-and-load.png"
    assert all(p.stat().st_size > 0 for p in written)
    twin = tmp_path / "twin.yaml"
    twin.write_text("base: llama3.1-8b-h200-eagle3\nname: h100-slow-host\n")
    with pytest.raises(BenchError, match="share the name h100-slow-host"):
        run_suite(suite.model_copy(update={"truths": (str(mine), str(twin))}), [trace])
    with pytest.raises(BenchError, match="neither a file nor a shipped truth"):
        run_suite(suite.model_copy(update={"truths": (str(tmp_path / "gone.yaml"),)}), [trace])
