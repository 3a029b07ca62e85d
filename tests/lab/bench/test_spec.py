from pathlib import Path

import pytest
from specops_lab.bench import (
    BenchError,
    BenchSuite,
    ControllerSpec,
    LoadTrace,
    Segment,
    ServiceSpec,
    load_suite,
)

REPO_BENCH = Path(__file__).resolve().parents[3] / "bench"


def test_shipped_suites_load_and_the_short_one_inherits_the_service() -> None:
    full, full_traces = load_suite(REPO_BENCH / "full.yaml")
    short, short_traces = load_suite(REPO_BENCH / "short.yaml")
    assert short.service == full.service
    assert {t.name for t in full_traces} == {"steady", "ramp", "bursts", "shift", "day", "noisy"}
    steady = next(t for t in short_traces if t.name == "steady")
    assert [s.concurrency for s in steady.segments] == [1, 32, 256]
    assert steady.segments[0].duration_s == pytest.approx(900)  # regimes the slow loop can act in
    shift = next(t for t in short_traces if t.name == "shift")
    assert shift.duration_s == pytest.approx(3600 * 0.5)
    assert len(short.truth_axis) == 2 and set(short.truth_axis) < set(full.truth_axis)


def test_ramp_segments_interpolate() -> None:
    ramp = Segment(duration_s=100, concurrency=16, to=64)
    assert ramp.at(0.0) == 16
    assert ramp.at(0.5) == 40
    assert Segment(duration_s=10, concurrency=8).at(0.7) == 8


def test_scaling_shortens_every_duration() -> None:
    trace = LoadTrace(
        name="t",
        workload="sharegpt",
        warmup_s=20,
        segments=(Segment(duration_s=100, concurrency=1), Segment(duration_s=50, concurrency=2)),
    )
    half = trace.scaled(0.5)
    assert half.duration_s == 75
    assert half.warmup_s == 10


_ONE_SEGMENT = "name: t\nworkload: sharegpt\nsegments:\n  - {duration_s: 100, concurrency: 4}\n"


def _suite(
    tmp_path: Path, trace: str, head: str = "", traces: str = "  - {trace: t.yaml}\n"
) -> Path:
    """A suite file beside one trace file ``t.yaml``: ``head`` are the suite's keys
    between its service and its traces."""
    (tmp_path / "t.yaml").write_text(trace)
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: s\nservice: {{prior_acceptance: [0.6]}}\n{head}traces:\n{traces}")
    return suite


def test_levels_must_name_sweep_segments(tmp_path: Path) -> None:
    suite = _suite(
        tmp_path,
        "name: t\nworkload: sharegpt\nsweep: true\n"
        "segments:\n  - {duration_s: 10, concurrency: 4}\n",
        traces="  - {trace: t.yaml, levels: [8]}\n",
    )
    with pytest.raises(BenchError, match=r"levels \[8\]"):
        load_suite(suite)


def test_invalid_trace_names_the_file(tmp_path: Path) -> None:
    suite = _suite(tmp_path, "name: t\nworkload: sharegpt\nsegments: []\n")
    with pytest.raises(BenchError, match="invalid trace"):
        load_suite(suite)


def test_a_sweep_warmup_must_leave_each_segment_something_to_measure(tmp_path: Path) -> None:
    suite = _suite(
        tmp_path,
        "name: warm\nworkload: sharegpt\nsweep: true\nwarmup_s: 250\n"
        "segments:\n  - {duration_s: 300, concurrency: 4}\n"
        "  - {duration_s: 200, concurrency: 16}\n",
    )
    with pytest.raises(BenchError, match=r"trace warm .*warmup_s 250 s .*segment 1:c16 \(200 s"):
        load_suite(suite)


def test_a_cycle_of_base_suites_is_refused_naming_the_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("base: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nname: b\n")
    with pytest.raises(BenchError, match=r"base suites form a cycle \(.*a\.yaml -> .*b\.yaml"):
        load_suite(tmp_path / "a.yaml")


def test_a_missing_base_suite_names_the_suite_that_refers_to_it(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("base: nosuch.yaml\nname: a\n")
    with pytest.raises(BenchError, match=r"suite .*a\.yaml: base nosuch\.yaml is not a file"):
        load_suite(tmp_path / "a.yaml")


def test_a_trace_name_is_a_file_name() -> None:
    with pytest.raises(ValueError, match="name"):
        LoadTrace(
            name="night/day", workload="sharegpt", segments=(Segment(duration_s=10, concurrency=1),)
        )


def test_two_traces_of_one_suite_may_not_share_a_name(tmp_path: Path) -> None:
    suite = _suite(
        tmp_path, _ONE_SEGMENT, traces="  - {trace: t.yaml}\n  - {trace: t.yaml, time_scale: 0.5}\n"
    )
    with pytest.raises(BenchError, match="traces share the name t "):
        load_suite(suite)


def test_one_label_may_not_name_two_mixes() -> None:
    def trace(second: dict[str, float] | None) -> LoadTrace:
        return LoadTrace(
            name="t",
            workload="shift",
            segments=(
                Segment(duration_s=10, concurrency=1, mix={"sharegpt": 1.0}, label="phase"),
                Segment(duration_s=10, concurrency=2, mix=second, label="phase"),
            ),
        )

    assert len(trace(None).segments) == 2  # the same mix, carried on, may share it
    with pytest.raises(ValueError, match="segments labelled 'phase' run different mixes"):
        trace({"hard": 1.0})


def test_an_unquoted_off_policy_is_off(tmp_path: Path) -> None:
    suite, _ = load_suite(_suite(tmp_path, _ONE_SEGMENT, "policies: [off, k1]\n"))
    assert suite.policies == ("off", "k1")


def test_a_window_must_hold_the_load_samples_a_decision_needs() -> None:
    with pytest.raises(ValueError, match=r"controller\.window_s 5 s .*controller\.scrape_s 10 s"):
        ControllerSpec(window_s=5, scrape_s=10)
    assert ControllerSpec(window_s=20, scrape_s=2).window_s == 20


def test_a_window_as_long_as_a_run_is_refused(tmp_path: Path) -> None:
    suite = _suite(
        tmp_path,
        _ONE_SEGMENT,
        "controller: {window_s: 60}\n",
        traces="  - {trace: t.yaml, time_scale: 0.5}\n",
    )
    with pytest.raises(BenchError, match=r"window_s 60 s is not shorter than trace t \(50 s"):
        load_suite(suite)


def test_a_suite_over_a_base_merges_mappings_and_replaces_lists(tmp_path: Path) -> None:
    for name in ("t", "u"):
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\nworkload: sharegpt\n"
            "segments:\n  - {duration_s: 100, concurrency: 4}\n"
        )
    (tmp_path / "base.yaml").write_text(
        "name: base\nservice: {prior_acceptance: [0.6], tpot_target_ms: 20, k_max: 5}\n"
        "traces:\n  - {trace: t.yaml}\n"
    )
    (tmp_path / "suite.yaml").write_text(
        "base: base.yaml\nname: s\nservice: {tpot_target_ms: 30}\ntraces:\n  - {trace: u.yaml}\n"
    )
    suite, traces = load_suite(tmp_path / "suite.yaml")
    assert (suite.service.tpot_target_ms, suite.service.k_max) == (30, 5)
    assert suite.service.prior_acceptance == (0.6,)
    assert [t.name for t in traces] == ["u"]


def test_truth_files_resolve_against_the_suite_file(tmp_path: Path) -> None:
    (tmp_path / "suites").mkdir()
    (tmp_path / "truths").mkdir()
    (tmp_path / "truths" / "slow.yaml").write_text("base: llama3.1-8b-h100-eagle3\nname: slow\n")
    (tmp_path / "t.yaml").write_text(
        "name: t\nworkload: sharegpt\nsegments:\n  - {duration_s: 100, concurrency: 4}\n"
    )
    (tmp_path / "suites" / "suite.yaml").write_text(
        "name: s\nservice: {prior_acceptance: [0.6], truth: ../truths/slow.yaml}\n"
        "truths: [../truths/slow.yaml, llama3.1-8b-h200-eagle3]\n"
        "traces:\n  - {trace: ../t.yaml}\n"
    )
    suite, _ = load_suite(tmp_path / "suites" / "suite.yaml")
    slow = str(tmp_path / "suites" / "../truths/slow.yaml")
    assert suite.truths == (slow, "llama3.1-8b-h200-eagle3")
    assert suite.service.truth == slow


def test_a_window_longer_than_a_run_matters_only_where_the_controller_runs(
    tmp_path: Path,
) -> None:
    short = _ONE_SEGMENT.replace("duration_s: 100", "duration_s: 30")
    suite, _ = load_suite(_suite(tmp_path, short, "policies: [k1]\n"))
    assert suite.controller.window_s == 60


def test_a_suite_must_run_some_policy() -> None:
    with pytest.raises(ValueError, match="policies"):
        BenchSuite.model_validate(
            {
                "name": "s",
                "service": {"prior_acceptance": [0.6]},
                "policies": [],
                "traces": [{"trace": "t.yaml"}],
            }
        )


def test_a_service_may_not_start_above_its_largest_k() -> None:
    # As the API server refuses numSpeculativeTokens.initial outside [min, max]: before,
    # the run silently started on k_max instead of the k asked for.
    with pytest.raises(ValueError, match=r"service\.initial_k 9 is above service\.k_max 2"):
        ServiceSpec(prior_acceptance=(0.7, 0.5), k_max=2, initial_k=9)
    assert ServiceSpec(prior_acceptance=(0.7,), k_max=2, initial_k=2).initial_k == 2
