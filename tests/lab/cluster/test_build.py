"""A missing toolchain or a failed build says what is missing and how to get it."""

from __future__ import annotations

from pathlib import Path

import pytest
from specops_lab.cluster._build import _once, _run_logged, find_etcd, find_go

from specops.errors import ClusterError


def test_missing_go_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="Go toolchain is missing") as caught:
        find_go({"PATH": str(tmp_path)}, fallback=tmp_path / "go")
    assert "SPECOPS_GO" in str(caught.value) and "go.dev/dl" in str(caught.value)


def test_missing_etcd_names_the_package(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="apt-get install etcd-server"):
        find_etcd({"PATH": str(tmp_path)}, fallback=tmp_path / "etcd")


def test_explicit_go_is_used(tmp_path: Path) -> None:
    go = tmp_path / "mygo"
    go.write_text("")
    assert find_go({"SPECOPS_GO": str(go), "PATH": ""}, fallback=tmp_path / "none") == go


def test_build_runs_once_and_only_a_finished_build_is_stamped(tmp_path: Path) -> None:
    output = tmp_path / "bin"
    runs: list[str] = []

    def failing() -> None:
        runs.append("failing")
        raise ClusterError("boom")

    def working() -> None:
        runs.append("working")
        output.write_text("")

    with pytest.raises(ClusterError):
        _once(tmp_path, {"v": "1"}, [output], failing)
    _once(tmp_path, {"v": "1"}, [output], working)
    _once(tmp_path, {"v": "1"}, [output], working)
    assert runs == ["failing", "working"]
    _once(tmp_path, {"v": "2"}, [output], working)
    assert runs == ["failing", "working", "working"]


@pytest.mark.integration
def test_failed_build_reports_exit_code_and_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    messages: list[str] = []
    with pytest.raises(ClusterError, match="exit 3") as caught:
        _run_logged(
            ["sh", "-c", "echo cannot find module k8s.io/nope; exit 3"],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            log=log,
            what="kubernetes",
            progress=messages.append,
        )
    assert "cannot find module k8s.io/nope" in str(caught.value)
    assert str(log) in str(caught.value)
