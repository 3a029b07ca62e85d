"""Waiting for and stopping single local processes, on real short-lived Python children."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from specops_lab.launch import (
    LaunchError,
    answers,
    free_ports,
    stop_process,
    wait_until_answers,
)

pytestmark = pytest.mark.integration

_IGNORES_SIGTERM = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ignoring SIGTERM', flush=True)\n"
    "time.sleep(60)\n"
)


def test_free_ports_are_distinct_and_nothing_answers_there() -> None:
    ports = free_ports(3)
    assert len(set(ports)) == 3
    assert not answers(f"http://127.0.0.1:{ports[0]}/")


def test_waiting_ends_when_the_server_exits() -> None:
    (port,) = free_ports(1)
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    try:
        with pytest.raises(LaunchError, match="exited with status 3"):
            wait_until_answers(f"http://127.0.0.1:{port}/", process, timeout_s=60.0)
    finally:
        stop_process(process)


def test_stop_kills_a_process_that_ignores_sigterm() -> None:
    argv = [sys.executable, "-c", _IGNORES_SIGTERM]
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline() == b"ignoring SIGTERM\n"
            stop_process(process, grace_s=0.5)
            assert process.returncode == -signal.SIGKILL
        finally:
            process.kill()
