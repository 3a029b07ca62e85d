"""The README's main job, ``specops demo``, run whole against the suite's control plane.

``--use-current-context`` points it at this session's cluster (the local control plane with
its fake GPU nodes), so the run covers everything after the cluster start: the chart, the
operator as the chart's identity, the pod runner, the example service, the built-in day of
load, the virtual-time replay of every policy and the report. The day's midday lies above
the default truth's crossover: the controller should turn speculation off there and back on
in the late evening, the pods should roll without cutting a request, the report's
comparison should be all virtual time on the named truth, and the live run should come
with the load its engines held and their fidelity to the truth.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from specops_lab.cluster import ClusterInfo
from specops_lab.demo import DemoOptions

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-demo"
INITIAL_K = 3
PNG = b"\x89PNG\r\n\x1a\n"


def _run_demo(cluster: ClusterInfo, tmp_path: Path) -> tuple[Path, str]:
    out = tmp_path / "demo"
    command = [
        str(Path(sys.executable).with_name("specops")),
        "demo",
        "--use-current-context",
        f"--out={out}",
        f"--namespace={NAMESPACE}",
        "--refresh=2",
    ]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=1500, check=False
    )
    printed = done.stdout + done.stderr
    assert done.returncode == 0, f"specops demo failed ({done.returncode}):\n{printed[-4000:]}"
    return out, printed


def _cap(config: str | None) -> int:
    """k of ``k=5`` or the cap of ``k<=5 [1-63:5 ...]``; 0 for ``off``."""
    found = re.match(r"k<?=(\d+)", config or "")
    return int(found.group(1)) if found else 0


def _comparison_rows(report: str) -> list[str]:
    start = report.index("## The day in virtual time, every policy")
    end = report.index("\n\n", report.index("| policy |", start))
    table = [line for line in report[start:end].splitlines() if line.startswith("|")]
    return table[2:]  # below the header and its rule


def _check_decisions(snapshots: list[dict[str, Any]], printed: str) -> None:
    applied = [
        s["decision"]
        for s in snapshots
        if s["decision"] and s["decision"]["applied"] and s["decision"]["action"] == "Reconfigure"
    ]
    unique = list({d["time"]: d for d in applied}.values())
    caps = [_cap(d["recommended"]) for d in unique]
    assert 0 in caps, f"speculation never turned off: {unique}\n{printed[-3000:]}"
    off_at = caps.index(0)
    assert any(k > 0 for k in caps[off_at + 1 :]), f"never back on after off: {unique}"
    assert max(caps[:off_at], default=INITIAL_K) >= INITIAL_K  # the night kept or lengthened
    rolled = [s["deployment"] for s in snapshots if s["deployment"] != "?"]
    assert "off" in rolled, f"the pods never rolled to off: {sorted(set(rolled))}"
    assert any(_cap(c) > 0 for c in rolled[rolled.index("off") :]), "pods never back on"


def _check_comparison(report: str, summary: dict[str, Any]) -> None:
    truth = DemoOptions().truth
    rows = _comparison_rows(report)
    names = {row.split(" | ")[0].removeprefix("| ") for row in rows}
    assert {"specops", "off", "k1", "k5", "vllm-table", "oracle"} <= names, rows
    assert all(" | virtual | " in row and f"| `{truth}` |" in row for row in rows), rows
    assert "live" not in " ".join(rows).lower()
    assert {row["clock"] for row in summary["comparison"]} == {"virtual"}
    assert {row["truth"] for row in summary["comparison"]} == {truth}
    first = report.split("\n\n")[1]
    assert first.startswith(f"On the engine truth `{truth}`"), first
    assert "turned speculation off at" in first and "of the oracle's goodput" in first
    replayed = [d["k"] for d in summary["replay_decisions"] if d["action"] == "Reconfigure"]
    assert 0 in replayed and any(k > 0 for k in replayed[replayed.index(0) :]), replayed


def _check_live_figures(report: str, summary: dict[str, Any], printed: str) -> None:
    ratio = summary["fidelity_ratio"]
    assert summary["fidelity_intervals"] >= 10
    assert ratio is not None and 0.7 <= ratio <= 3.0, ratio
    assert f"Live fidelity ratio (measured / truth, all busy intervals): {ratio:.2f}" in report
    assert f"{ratio:.2f}x the time the truth gives" in printed  # the report is printed
    peak = max(summary["held"], key=lambda h: h["wanted"])
    wanted, client, engine = peak["wanted"], peak["client"], peak["engine"]
    assert wanted >= 150, peak
    assert 0.9 * wanted <= client <= 1.02 * wanted, peak
    assert engine is not None and 0.75 * wanted <= engine <= 1.05 * client, peak
    assert f"| {peak['phase']} | {wanted:.1f} | {client:.1f} | {engine:.1f} |" in report


@pytest.mark.timeout(1800)
def test_demo_turns_speculation_off_at_midday_and_on_again_and_reports_like_with_like(
    cluster: ClusterInfo, tmp_path: Path
) -> None:
    out, printed = _run_demo(cluster, tmp_path)

    report = (out / "report.md").read_text()
    for png in ("load-and-k.png", "comparison.png"):
        assert (out / png).read_bytes().startswith(PNG), png
        assert f"({png})" in report
    snapshots = json.loads((out / "snapshots.json").read_text())
    assert snapshots, "the demo recorded no snapshot"
    last = snapshots[-1]
    assert last["load"]["completed"] > 0, printed[-2000:]
    # Old pods drain (preStop, vLLM's --shutdown-timeout) before they stop: no request is cut.
    assert last["load"]["failed"] == 0, printed[-2000:]
    assert any(s["engine_in_flight"] for s in snapshots)  # the live view read the engines
    summary = json.loads((out / "summary.json").read_text())

    _check_decisions(snapshots, printed)
    _check_comparison(report, summary)
    _check_live_figures(report, summary, printed)
    assert f"`{NAMESPACE}/" in report and "| Reconfigure |" in report
