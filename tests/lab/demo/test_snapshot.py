"""A moment of the demo from plain API objects, and the live table rendered from it."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from specops_lab.demo import (
    CrossoverView,
    LoadCounts,
    Snapshot,
    decision_line,
    decisions_of,
    describe_vllm_config,
    engine_config,
    load_gauge,
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
        "stepTimeModel": {"source": "Measured", "intervals": 43, "steps": 6400},
        "crossovers": [
            {"k": 1, "batchSize": 144, "batchSizeLow": 120, "batchSizeHigh": 170},
            {"k": 3, "batchSize": 91, "batchSizeLow": 80, "batchSizeHigh": 100},
            {"k": 5, "batchSize": 59, "batchSizeLow": 50},
        ],
    },
    "kopf": {"progress": {}},  # what kopf keeps in status is none of the demo's business
}


def _snapshot(service: dict[str, Any] | None, deployment: dict[str, Any] | None) -> Snapshot:
    return take_snapshot(
        elapsed_s=75.0,
        duration_s=360.0,
        phase="morning",
        load=LoadCounts(target=24, in_flight=23, completed=310, failed=1),
        engine_in_flight=22.0,
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
    assert snap.decision.step_time == "Measured" and snap.decision.step_time_intervals == 43
    assert snap.decision.crossover(5) == CrossoverView(5, 59, 50, None)
    assert snap.decision.last_crossover == CrossoverView(1, 144, 120, 170)
    assert snap.engine_in_flight == 22.0
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


def _text(snapshot: Snapshot, width: int = 200) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(render_table(snapshot, decisions_of([snapshot])))
    return console.export_text()


def test_table_shows_load_against_the_crossover_and_each_decision() -> None:
    text = _text(_snapshot({"status": STATUS}, _deployment({"num_speculative_tokens": 5})))
    assert "1:15 / 6:00" in text and "morning" in text
    assert (
        "24 wanted, 23 in flight in the client, 22 in the engines (running + waiting); "
        "310 done, 1 failed" in text
    )
    assert "] 12 below" in text  # 12.5 running per pod, below the crossover of 144
    assert "in force: k=3 at batch 91 (10-90 %: 80-100)" in text
    assert "no k pays above batch 144 (k=1 at batch 144 (10-90 %: 120-170))" in text
    assert "step time Measured, 43 intervals" in text
    assert "12.5 running per pod, acceptance length 2.31, TPOT 7.1 ms" in text
    assert "k=3 (Deployment: k=5)" in text
    assert "Reconfigure (GainPaysRestart) -> k=5, gain +6.0 %: k=5 gains 6 % at 4" in text
    assert "1/2 ready; engines: 1x k=3, 1x k=5, 1x off" in text


def test_table_before_any_decision_says_why_it_is_empty() -> None:
    text = _text(_snapshot(None, None))
    assert "none yet (the first needs a full measurement window)" in text
    assert "crossover     not measured yet" in text
    assert "engines: 1x k=3" in text


def test_the_gauge_marks_the_load_the_crossover_and_its_band() -> None:
    band = CrossoverView(1, 100, 80, 120)
    above = load_gauge(180.0, band, width=24)
    assert above.endswith("] 180 above") and above.count("|") == 1
    assert ":" not in above  # the load covers the band
    below = load_gauge(20.0, band, width=24)
    assert below.endswith("] 20 below") and ":" in below
    assert load_gauge(20.0, None, width=24).endswith("] 20")
    assert load_gauge(None, band) == ""


def test_summary_and_decision_lines_for_logs() -> None:
    snapshot = _snapshot({"status": STATUS}, _deployment({"num_speculative_tokens": 5}))
    line = summary_line(snapshot)
    assert line.startswith("[1:15] morning: wanted 24, client 23, engines 22 in flight")
    assert "no k pays above 144" in line
    assert "k k=3, recommended k=5, last Reconfigure/GainPaysRestart, pods 1/2" in line
    assert snapshot.decision is not None
    assert decision_line(snapshot.decision).startswith(
        "00:01:00 Reconfigure (GainPaysRestart) -> k=5, gain +6.0 %: k=5 gains"
    )
