"""The README's main job, ``specops demo``, run whole against the suite's control plane.

``--use-current-context`` points it at this session's cluster (the local control plane with
its fake GPU nodes), so the run covers everything after the cluster start: the chart, the
operator as the chart's identity, the pod runner, the example service, a load that keeps
few requests in flight, the simulated baselines and the report. At that load the
controller should lengthen the drafts, the pods should roll without cutting a request, and
the report should show it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specops.cluster import ClusterInfo

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-demo"
LOW = 4
INITIAL_K = 3
PNG = b"\x89PNG\r\n\x1a\n"


def _run_demo(cluster: ClusterInfo, tmp_path: Path) -> tuple[Path, str]:
    trace = tmp_path / "low.yaml"
    trace.write_text(
        yaml.safe_dump(
            {
                "name": "low",
                "description": "a few requests in flight all along",
                "workload": "sharegpt",
                "segments": [{"duration_s": 120, "concurrency": LOW, "label": "low"}],
            }
        )
    )
    out = tmp_path / "demo"
    command = [
        str(Path(sys.executable).with_name("specops")),
        "demo",
        "--use-current-context",
        f"--out={out}",
        f"--trace={trace}",
        "--minutes=2",
        f"--namespace={NAMESPACE}",
        "--startup-delay=2",
        "--refresh=2",
    ]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    printed = done.stdout + done.stderr
    assert done.returncode == 0, f"specops demo failed ({done.returncode}):\n{printed[-4000:]}"
    return out, printed


def _cap(config: str) -> int:
    """k of ``k=5`` or the cap of ``k<=5 [1-63:5 ...]``; 0 for ``off``."""
    found = re.match(r"k<?=(\d+)", config)
    return int(found.group(1)) if found else 0


def test_demo_on_the_current_context_lengthens_drafts_at_low_load_and_reports_it(
    cluster: ClusterInfo, tmp_path: Path
) -> None:
    out, printed = _run_demo(cluster, tmp_path)

    report = (out / "report.md").read_text()
    for png in ("load-and-k.png", "baselines.png"):
        assert (out / png).read_bytes().startswith(PNG), png
        assert f"({png})" in report
    assert "## What the controller decided" in report and "(simulated)" in report

    snapshots = json.loads((out / "snapshots.json").read_text())
    assert snapshots, "the demo recorded no snapshot"
    last = snapshots[-1]
    assert last["load"]["completed"] > 0, printed[-2000:]
    # Old pods drain (preStop, vLLM's --shutdown-timeout) before they stop: no request is cut.
    assert last["load"]["failed"] == 0, printed[-2000:]
    applied = [
        s["decision"]
        for s in snapshots
        if s["decision"] and s["decision"]["applied"] and s["decision"]["action"] == "Reconfigure"
    ]
    assert applied, f"no reconfiguration at low load; last decision {last['decision']}"
    assert max(_cap(a["recommended"]) for a in applied) > INITIAL_K, applied
    rolled = {s["deployment"] for s in snapshots if s["deployment"] != "?"}
    assert max(_cap(config) for config in rolled) > INITIAL_K, f"pods never rolled: {rolled}"
    assert f"`{NAMESPACE}/" in report and "| Reconfigure |" in report
