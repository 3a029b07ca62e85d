"""The closing report: decisions in order, live figures next to the simulated baselines, plots."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specops.bench import RunResult, Summary
from specops.demo import (
    Baseline,
    DecisionView,
    EventView,
    LoadCounts,
    Measured,
    RunRecord,
    Snapshot,
    decisions_of,
    load_demo_trace,
    markdown,
    plot,
)

TRACE = load_demo_trace(None, 6)


def _decision(time: str, action: str, applied: bool = False, **more: object) -> DecisionView:
    return DecisionView(
        time=time,
        action=action,
        reason_code=more.get("code", "Code"),  # type: ignore[arg-type]
        reason=f"{action} because | of the load",
        applied=applied,
        recommended=more.get("recommended"),  # type: ignore[arg-type]
        predicted_gain_percent=more.get("gain"),  # type: ignore[arg-type]
    )


def _snap(at: float, deployment: str, decision: DecisionView | None) -> Snapshot:
    return Snapshot(
        elapsed_s=at,
        duration_s=TRACE.duration_s,
        phase="night",
        load=LoadCounts(4, 4, 10, 0),
        concurrency=3.9,
        acceptance_length=2.3,
        tpot_ms=7.0,
        in_force=deployment,
        deployment=deployment,
        decision=decision,
        ready=1,
        desired=1,
        engines=(deployment,),
    )


KEEP = _decision("10:00:30", "Keep")
UP = _decision("10:01:00", "Reconfigure", True, recommended="k=5", gain=6.25, code="GainPays")
HOLD = _decision("10:03:00", "Withhold", recommended="k=2", code="MinDwell")
HOLD_AGAIN = replace(HOLD, time="10:04:00")
SNAPSHOTS = (
    _snap(0, "k=3", None),
    _snap(30, "k=3", KEEP),
    _snap(33, "k=3", KEEP),
    _snap(60, "k=5", UP),
    _snap(63, "k=5", UP),
    _snap(180, "k=5", HOLD),
    _snap(240, "k=5", HOLD_AGAIN),
)


def _baseline(name: str, tpot: float, rate: float) -> Baseline:
    run = RunResult(name, TRACE.name, (), 0, (), (), "llama3.1-8b-h100-eagle3")
    return Baseline(name, Summary(rate, rate, tpot, tpot * 1.2, 0), run)


RECORD = RunRecord(
    trace=TRACE,
    snapshots=SNAPSHOTS,
    events=(
        EventView("10:00:30", "Keep", "AlreadyBest: k=3 is the best config"),
        EventView("10:01:00", "Reconfigure", "k 3 -> 5"),
    ),
    measured=Measured(mean_tpot_s=0.0071, throughput=4321.0, completed=900, failed=2),
    baselines=(_baseline("off", 0.0108, 4133.0), _baseline("static k=3", 0.0068, 6692.0)),
    timings=(("Start the local Kubernetes control plane", 4.6),),
    service="specops-demo/llama",
)


def test_each_decision_once_in_order() -> None:
    assert decisions_of(SNAPSHOTS) == (KEEP, UP, HOLD, HOLD_AGAIN)


def test_report_lists_changes_figures_and_says_the_baselines_are_simulated() -> None:
    text = markdown(RECORD, (Path("load-and-k.png"),))
    assert "on the engine truth llama3.1-8b-h100-eagle3" in text  # the figures name their truth
    assert "| 10:01:00 | Reconfigure | GainPays | k=5 | yes | +6.2 | 1 |" in text
    assert "| 10:03:00 | Withhold | MinDwell | k=2 | no | - | 2 |" in text
    assert "10:04:00" not in text  # the same withhold again is counted, not listed
    assert "because \\| of the load" in text  # a pipe cannot break the table
    assert (
        "Decisions seen, by outcome: Keep/Code x1, Reconfigure/GainPays x1, Withhold/MinDwell x2."
        in text
    )
    assert "k=3 from 0 s, k=5 from 60 s." in text
    assert "Events on the SpeculativeService: 2; those of its changes:" in text
    assert "- 10:01:00 Reconfigure: k 3 -> 5" in text
    assert "AlreadyBest: k=3 is the best config" not in text
    assert "| specops, live (real processes, measured) | 7.10 | - | 4321 | 1 |" in text
    assert "| off (simulated) | 10.80 | 12.96 | 4133 | 0 |" in text
    assert "| static k=3 (simulated) | 6.80 | 8.16 | 6692 | 0 |" in text
    assert "The baselines are simulated" in text
    assert "900 requests completed (2 failed)" in text
    assert "| Start the local Kubernetes control plane | 4.6 |" in text
    assert "![load-and-k](load-and-k.png)" in text


def test_report_without_decisions_says_so() -> None:
    quiet = replace(RECORD, snapshots=(_snap(0, "k=3", None),), events=())
    text = markdown(quiet, ())
    assert "No reconfiguration or withheld change was recorded." in text
    assert "## Plots" not in text


def test_plots_are_png_files(tmp_path: Path) -> None:
    paths = plot(RECORD, tmp_path / "out")
    assert [p.name for p in paths] == ["load-and-k.png", "baselines.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
