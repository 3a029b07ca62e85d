"""The demo's day: scaled to the asked length, noise-free, and the concurrency it asks for."""

from __future__ import annotations

from pathlib import Path

import pytest
from specops_lab.demo import DemoError, concurrency_at, load_demo_trace, segment_at


def test_builtin_day_scales_to_the_minutes_asked() -> None:
    six = load_demo_trace(None, 6.0)
    three = load_demo_trace(None, 3.0)
    assert six.duration_s == pytest.approx(360.0)
    assert three.duration_s == pytest.approx(180.0)
    assert [s.duration_s * 2 for s in three.segments] == pytest.approx(
        [s.duration_s for s in six.segments]
    )
    assert six.noise == 0.0


def _trace(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "trace.yaml"
    path.write_text(body)
    return path


RAMP = """
name: ramp
workload: sharegpt
noise: 0.3
segments:
  - {duration_s: 10, concurrency: 2, label: low}
  - {duration_s: 10, concurrency: 2, to: 22}
  - {duration_s: 20, concurrency: 50, label: high}
"""


def test_concurrency_follows_constant_and_ramping_segments(tmp_path: Path) -> None:
    trace = load_demo_trace(_trace(tmp_path, RAMP), 40 / 60)
    assert trace.noise == 0.0
    assert concurrency_at(trace, 0.0) == 2
    assert concurrency_at(trace, 9.9) == 2
    assert concurrency_at(trace, 15.0) == 12  # half way up 2 -> 22
    assert concurrency_at(trace, 25.0) == 50
    assert concurrency_at(trace, 40.0) == 0  # the day is over
    assert [segment_at(trace, t) for t in (0.0, 10.0, 39.0, 99.0)] == [0, 1, 2, 2]


def test_bad_traces_are_refused_with_the_file_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(DemoError, match="cannot read the load trace"):
        load_demo_trace(missing, 5)
    with pytest.raises(DemoError, match=r"trace\.yaml is not a load trace"):
        load_demo_trace(_trace(tmp_path, "name: x\nsegments: []\n"), 5)
    sweep = RAMP.replace("noise: 0.3", "sweep: true")
    with pytest.raises(DemoError, match="is a sweep"):
        load_demo_trace(_trace(tmp_path, sweep), 5)
    with pytest.raises(DemoError, match="--minutes must be > 0"):
        load_demo_trace(None, 0)
