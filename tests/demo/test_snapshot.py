"""A moment of the demo from plain API objects, and the live table rendered from it."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

from specops.demo import (
    LoadCounts,
    Snapshot,
    describe_vllm_config,
    engine_config,
    render_table,
    summary_line,
    take_snapshot,
)

TABLE = {"num_speculative_tokens_per_batch_size": [[1, 63, 5], [64, 256, 2]]}


def _deployment(config: dict[str, Any] | None, ready: int = 1) -> dict[str, Any]:
    args = ["--model", "m"]
    if config is not None:
        args += ["--speculative-config", json.dumps(config)]
    return {
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": [{"name": "vllm", "args": args}]}},
        },
        "status": {"readyReplicas": ready},
    }


STATUS = {
    "speculativeConfig": {"enabled": True, "method": "eagle3", "numSpeculativeTokens": 3},
    "lastMeasurements": {"concurrency": 12.5, "acceptanceLength": 2.31, "tpotSeconds": 0.0071},
    "lastDecision": {
        "time": "2026-01-01T00:01:00Z",
        "action": "Reconfigure",
        "reasonCode": "GainPaysRestart",
        "reason": "k=5 gains 6 % at 4 running requests",
        "predictedGainPercent": 6.0,
        "applied": True,
        "recommended": {"enabled": True, "numSpeculativeTokens": 5},
    },
    "kopf": {"progress": {}},  # what kopf keeps in status is none of the demo's business
}


def _snapshot(service: dict[str, Any] | None, deployment: dict[str, Any] | None) -> Snapshot:
    return take_snapshot(
        elapsed_s=75.0,
        duration_s=360.0,
        phase="morning",
        load=LoadCounts(target=24, in_flight=23, completed=310, failed=1),
        service=service,
        deployment=deployment,
        engines=['{"num_speculative_tokens": 5}', '{"num_speculative_tokens": 3}', None],
    )


def test_snapshot_reads_status_deployment_and_engines() -> None:
    snap = _snapshot({"status": STATUS}, _deployment({"num_speculative_tokens": 5}))
    assert (snap.concurrency, snap.acceptance_length) == (12.5, 2.31)
    assert snap.tpot_ms is not None and abs(snap.tpot_ms - 7.1) < 1e-9
    assert snap.in_force == "k=3"
    assert snap.deployment == "k=5"
    assert snap.decision is not None
    assert (snap.decision.action, snap.decision.recommended) == ("Reconfigure", "k=5")
    assert (snap.ready, snap.desired) == (1, 2)
    assert snap.engines == ("k=3", "k=5", "off")


def test_missing_or_unknown_parts_leave_blanks_not_errors() -> None:
    broken = {"status": {**STATUS, "lastDecision": {"action": "Dance"}, "lastMeasurements": 7}}
    snap = _snapshot(broken, None)
    assert snap.decision is None and snap.concurrency is None
    assert snap.in_force == "k=3"
    assert (snap.deployment, snap.ready, snap.desired) == ("?", 0, 0)
    empty = _snapshot(None, _deployment(None))
    assert (empty.in_force, empty.deployment) == ("?", "off")


def test_config_words_for_k_tables_and_garbage() -> None:
    assert describe_vllm_config(json.dumps({"num_speculative_tokens": 5, **TABLE})) == (
        "k<=5 [1-63:5 64-256:2]"
    )
    assert describe_vllm_config("{not json") == "?"
    assert describe_vllm_config(None) == "off"
    assert engine_config(_deployment({"num_speculative_tokens": 2})) == (
        '{"num_speculative_tokens": 2}'
    )


def _text(snapshot: Snapshot) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(render_table(snapshot))
    return console.export_text()


def test_table_shows_what_the_controller_sees_and_decides() -> None:
    text = _text(_snapshot({"status": STATUS}, _deployment({"num_speculative_tokens": 5})))
    assert "1:15 / 6:00" in text and "morning" in text
    assert "24 wanted, 23 in flight, 310 done, 1 failed" in text
    assert "concurrency 12.5 per pod, acceptance length 2.31, TPOT 7.1 ms" in text
    assert "Reconfigure (GainPaysRestart)" in text and "predicted gain +6.0 %" in text
    assert "k=5 gains 6 % at 4 running requests" in text
    assert "1/2 ready; engines: 1x k=3, 1x k=5, 1x off" in text


def test_table_before_any_decision_says_why_it_is_empty() -> None:
    text = _text(_snapshot(None, None))
    assert "none yet (the first needs a full measurement window)" in text
    assert "engines: 1x k=3" in text


def test_summary_line_for_logs() -> None:
    line = summary_line(_snapshot({"status": STATUS}, _deployment({"num_speculative_tokens": 5})))
    assert line.startswith("[1:15] morning: load 24 (in flight 23)")
    assert "k k=3, recommended k=5, last Reconfigure/GainPaysRestart, pods 1/2" in line
