"""`specops podrunner` says what is wrong before it runs anything."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from specops.cli import main

_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_an_unreadable_kubeconfig_is_named(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("current-context: nowhere\n")
    result = CliRunner().invoke(
        main, ["podrunner", f"--kubeconfig={kubeconfig}", f"--work-dir={tmp_path}"]
    )
    assert result.exit_code == 1
    assert "cannot load the kubeconfig" in result.output


def test_a_missing_prometheus_says_how_to_get_it(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(_KUBECONFIG)
    args = [
        "podrunner",
        f"--kubeconfig={kubeconfig}",
        f"--work-dir={tmp_path / 'work'}",
        f"--prometheus={tmp_path / 'no-prometheus'}",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "install Debian's `prometheus` package" in result.output
