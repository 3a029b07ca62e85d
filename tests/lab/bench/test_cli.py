"""The benchmark end to end on a tiny suite: every output is written and well formed."""

import json
from pathlib import Path

from click.testing import CliRunner

from specops.cli import main

REPO_BENCH = Path(__file__).resolve().parents[3] / "bench"


def test_bench_runs_a_short_suite_and_writes_results(tmp_path: Path) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"base: {REPO_BENCH / 'full.yaml'}\n"
        "name: ci\n"
        "truths: [llama3.1-8b-h100-eagle3]\n"
        "policies: ['off', k3, vllm-table, turbospec, specops]\n"
        "traces:\n"
        f"  - {{trace: {REPO_BENCH / 'traces/steady.yaml'}, levels: [1, 64], time_scale: 0.1}}\n"
        f"  - {{trace: {REPO_BENCH / 'traces/bursts.yaml'}, time_scale: 0.03}}\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["bench", "--suite", str(suite), "--out", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert "| specops |" in result.output
    data = json.loads((out / "results.json").read_text())
    assert set(data["traces"]) == {"steady", "bursts"}
    bursts = data["traces"]["bursts"]["policies"]
    assert set(bursts) == {
        "off",
        "k3",
        "vllm-table",
        "turbospec",
        "specops",
        "truth-table",
        "oracle",
    }
    assert bursts["oracle"]["goodput_over_oracle"] == 1.0
    assert all(p["throughput"] > 0 for p in bursts.values())
    assert {t["trace"] for t in data["targets"]} >= {"steady@c1", "steady@c64", "bursts"}
    assert (out / "results.md").read_text().startswith("Command: ")
    assert (out / "steady-tpot-vs-concurrency.png").stat().st_size > 0
    assert (out / "bursts-k-and-load.png").stat().st_size > 0
