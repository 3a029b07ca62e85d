"""The closing report: what happened in plain words from the virtual-time replay, the
comparison in one clock with the truth named, the live run as a check (its decisions, the
load its engines held, its fidelity to the truth), plots and a JSON summary."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specops_lab.bench import (
    DecisionRecord,
    LoadTrace,
    RunResult,
    Segment,
    SegmentStats,
    oracle,
)
from specops_lab.demo import (
    CrossoverView,
    DecisionView,
    EventView,
    Fidelity,
    HeldLoad,
    LiveFigures,
    LoadCounts,
    Replay,
    RunRecord,
    Snapshot,
    StepCheck,
    decisions_of,
    first_paragraph,
    markdown,
    plot,
    summary_json,
)

TRUTH = "llama3.1-8b-h200-eagle3"
TRACE = LoadTrace(
    name="demo-day",
    description="quiet night, busy midday",
    workload="sharegpt",
    segments=(
        Segment(duration_s=60, concurrency=4, label="night"),
        Segment(duration_s=60, concurrency=200, label="midday"),
    ),
)
# The replay's day: each phase in two slices of 30 s.
SLICED = TRACE.model_copy(
    update={
        "segments": (
            *[Segment(duration_s=30, concurrency=4, label="night")] * 2,
            *[Segment(duration_s=30, concurrency=200, label="midday")] * 2,
        )
    }
)
# Tokens per slice of each policy: speculation wins at night, loses at midday.
TOKENS = {
    "off": (20_000, 20_000, 400_000, 400_000),
    "k1": (24_000, 24_000, 380_000, 380_000),
    "k5": (33_000, 33_000, 250_000, 250_000),
    "vllm-table": (32_000, 32_000, 300_000, 300_000),
    "specops": (26_000, 33_000, 200_000, 400_000),
}


def _run(name: str) -> RunResult:
    segments = tuple(
        SegmentStats(
            name=s.label or "",
            start=30.0 * i,
            end=30.0 * (i + 1),
            tokens=tokens,
            tpots=(0.004 if i < 2 else 0.012,) * 10,
            finished_tokens=tokens,
            slo_tokens=tokens,
        )
        for i, (s, tokens) in enumerate(zip(SLICED.segments, TOKENS[name], strict=True))
    )
    decisions: tuple[DecisionRecord, ...] = ()
    timeline = tuple((2.0 * i, 4 if i < 30 else 186, 5) for i in range(60))
    if name == "specops":
        decisions = (
            DecisionRecord(30, "Reconfigure", "k=5", "k=5", 0.08, "probe", "ProbeUnmeasuredK", 5),
            DecisionRecord(60, "Withhold", "k=5", None, None, "moved", "RegimeUnconfirmed", 5),
            DecisionRecord(
                90,
                "Reconfigure",
                "off",
                "off",
                0.6,
                "above every crossover",
                "GainPaysRestart",
                0,
                crossovers=((1, 144), (5, 59)),
                crossover_bands=((1, 120, 170), (5, 50, 70)),
            ),
        )
        timeline = tuple(
            (2.0 * i, 4 if i < 30 else 186, 3 if i < 15 else (5 if i < 45 else 0))
            for i in range(60)
        )
    return RunResult(name, SLICED.name, segments, len(decisions) - 1, timeline, decisions, TRUTH)


RESULTS = oracle(SLICED, {name: _run(name) for name in TOKENS}, ["off", "k1", "k5", "vllm-table"])
REPLAY = Replay(RESULTS, k_max=5, initial_k=3, window_s=30.0, restart_s=10.0)


def _decision(time: str, action: str, applied: bool = False, **more: object) -> DecisionView:
    return DecisionView(
        time=time,
        action=action,
        reason_code=more.get("code", "Code"),  # type: ignore[arg-type]
        reason=f"{action} because | of the load",
        applied=applied,
        recommended=more.get("recommended"),  # type: ignore[arg-type]
        predicted_gain_percent=more.get("gain"),  # type: ignore[arg-type]
        crossovers=(CrossoverView(1, 150, 130, 170), CrossoverView(5, 60, 50, 70)),
        step_time="Measured",
        step_time_intervals=40,
    )


def _snap(at: float, deployment: str, decision: DecisionView | None) -> Snapshot:
    return Snapshot(
        elapsed_s=at,
        duration_s=TRACE.duration_s,
        phase="night" if at < 60 else "midday",
        load=LoadCounts(4 if at < 60 else 200, 4, 10, 0),
        engine_in_flight=4.0 if at < 60 else 187.0,
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
HOLD = _decision("10:01:30", "Withhold", recommended="k=2", code="MinDwell")
HOLD_AGAIN = replace(HOLD, time="10:01:40")
OFF = _decision("10:02:00", "Reconfigure", True, recommended="off", gain=40.0, code="GainPays")
SNAPSHOTS = (
    _snap(0, "k=3", None),
    _snap(30, "k=3", KEEP),
    _snap(33, "k=3", KEEP),
    _snap(60, "k=5", UP),
    _snap(63, "k=5", UP),
    _snap(90, "k=5", HOLD),
    _snap(100, "k=5", HOLD_AGAIN),
    _snap(110, "off", OFF),
)
FIDELITY = Fidelity(
    TRUTH,
    (
        StepCheck(20.0, "night", 5, 4.0, 0.0110, 0.0090, 900),
        StepCheck(100.0, "midday", 0, 186.0, 0.0125, 0.0115, 800),
    ),
)
LIVE = LiveFigures(
    completed=900,
    failed=2,
    held=(HeldLoad("night", 4.0, 4.0, 3.9), HeldLoad("midday", 200.0, 199.5, 187.0)),
    day=HeldLoad("whole day", 102.0, 101.7, 95.4),
    engine_by_request_time=94.8,
    fidelity=FIDELITY,
    in_flight=((10.0, 3.9), (70.0, 150.0), (110.0, 187.0)),
)
RECORD = RunRecord(
    trace=TRACE,
    snapshots=SNAPSHOTS,
    events=(
        EventView("10:00:30", "Keep", "AlreadyBest: k=3 is the best config"),
        EventView("10:01:00", "Reconfigure", "k 3 -> 5"),
    ),
    live=LIVE,
    replay=REPLAY,
    timings=(("Start the local Kubernetes control plane", 4.6),),
    service="specops-demo/llama",
)


def test_each_decision_once_in_order() -> None:
    assert decisions_of(SNAPSHOTS) == (KEEP, UP, HOLD, HOLD_AGAIN, OFF)


def test_the_first_paragraph_says_what_happened_from_the_replay() -> None:
    text = first_paragraph(RECORD)
    assert text.startswith(f"On the engine truth `{TRUTH}`, the demo's day (2 minutes")
    assert (
        "started at k=3, went to k=5 at 0:30 (night, 4 running; a probe of a k whose step time"
        " was never measured) and turned speculation off at 1:30 (midday, 186 running, above"
        " the measured crossover: no k pays above batch 144 (k=1))." in text
    )
    # Goodput over the day against each baseline, and the oracle's share.
    assert "22% below no speculation, 18% below the best static k (1)" in text
    assert "1% below vLLM's documented table, 76% of the oracle's goodput" in text
    assert "By phase: night +48% over no speculation" in text
    # Then the live run, as a check.
    assert "the controller reconfigured to k=5 at 1:00, off at 1:50;" in text
    assert "At midday the engines held 187 of the 200 requests wanted" in text
    assert "steps took 1.15x the time the truth gives" in text


def test_every_comparison_row_is_virtual_time_on_the_named_truth() -> None:
    text = markdown(RECORD, (Path("load-and-k.png"),))
    start = text.index("## The day in virtual time, every policy")
    rows = [
        line
        for line in text[start:].splitlines()
        if line.startswith("| ") and "| virtual |" in line
    ]
    assert {row.split(" | ")[0].removeprefix("| ") for row in rows} == {
        "off",
        "k1",
        "k5",
        "vllm-table",
        "specops",
        "oracle",
    }
    assert all(f"| `{TRUTH}` |" in row for row in rows)
    assert "live" not in text[start : text.index("## The live run")].lower().replace("deliver", "")


def test_the_live_run_is_decisions_load_held_and_fidelity() -> None:
    text = markdown(RECORD, (Path("load-and-k.png"),))
    assert "| 10:01:00 | 1:00 | Reconfigure | GainPays | k=5 | yes | +6.2 | 1 |" in text
    assert "| 10:01:30 | 1:30 | Withhold | MinDwell | k=2 | no | - | 2 |" in text
    assert "10:01:40" not in text  # the same withhold again is counted, not listed
    assert "because \\| of the load" in text  # a pipe cannot break the table
    assert "k=3 from 0 s, k=5 from 60 s, off from 110 s." in text
    assert "- 10:01:00 Reconfigure: k 3 -> 5" in text
    assert "AlreadyBest: k=3 is the best config" not in text
    assert "| midday | 200.0 | 199.5 | 187.0 | 94% |" in text
    assert "they held 94.8 over the whole day" in text
    assert "| night | k=5 | 4.0 | 11.00 | 9.00 | 1.22 |" in text
    assert (
        "Live fidelity ratio (measured / truth, all busy intervals): 1.15 over 2 intervals." in text
    )
    assert "| Start the local Kubernetes control plane | 4.6 |" in text
    assert "![load-and-k](load-and-k.png)" in text


def test_report_without_live_decisions_says_so() -> None:
    quiet = replace(RECORD, snapshots=(_snap(0, "k=3", None),), events=())
    text = markdown(quiet, ())
    assert "No reconfiguration or withheld change was recorded." in text
    assert "reconfigured to no change" in text


def test_summary_json_has_the_comparison_the_decisions_and_the_checks() -> None:
    summary = summary_json(RECORD)
    assert {row["clock"] for row in summary["comparison"]} == {"virtual"}
    assert {row["truth"] for row in summary["comparison"]} == {TRUTH}
    assert [d["k"] for d in summary["replay_decisions"]] == [5, 5, 0]
    assert [d["recommended"] for d in summary["live_decisions"] if d["applied"]] == ["k=5", "off"]
    assert summary["fidelity_ratio"] == FIDELITY.ratio()
    assert summary["held"][1] == {
        "phase": "midday",
        "wanted": 200.0,
        "client": 199.5,
        "engine": 187.0,
    }


def test_plots_are_png_files(tmp_path: Path) -> None:
    paths = plot(RECORD, tmp_path / "out")
    assert [p.name for p in paths] == ["load-and-k.png", "comparison.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
