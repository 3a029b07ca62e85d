"""``specops cluster`` when there is no cluster, and its argument checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from specops.cli import main


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("SPECOPS_CACHE", str(tmp_path))
    return CliRunner()


@pytest.mark.parametrize("command", ["status", "env"])
def test_no_cluster_is_an_error(runner: CliRunner, command: str) -> None:
    result = runner.invoke(main, ["cluster", command, "--name", "absent"])
    assert result.exit_code == 1
    assert "'absent' is not running" in result.output


def test_down_without_a_cluster_says_so(runner: CliRunner) -> None:
    result = runner.invoke(main, ["cluster", "down", "--name", "absent"])
    assert result.exit_code == 0
    assert "was not running" in result.output


def test_kubeconfig_needs_exactly_one_identity(runner: CliRunner, tmp_path: Path) -> None:
    out = str(tmp_path / "k")
    both = ["cluster", "kubeconfig", "--user", "u", "--service-account", "a/b", "-o", out]
    assert "exactly one" in runner.invoke(main, both).output
    neither = ["cluster", "kubeconfig", "-o", out]
    assert runner.invoke(main, neither).exit_code == 2


def test_build_reports_a_failing_toolchain(runner: CliRunner, tmp_path: Path) -> None:
    fake_go = tmp_path / "go"
    fake_go.write_text("#!/bin/sh\necho 'go: no module proxy today' >&2\nexit 3\n")
    fake_go.chmod(0o755)
    result = runner.invoke(main, ["cluster", "build"], env={"SPECOPS_GO": str(fake_go)})
    assert result.exit_code == 1
    assert "no module proxy today" in result.output
