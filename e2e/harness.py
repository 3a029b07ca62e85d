"""Types and helpers of the e2e fixtures, for test modules to import (two conftest.py files
would clash)."""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from specops.cluster._process import free_ports, spawn

__all__ = ["Kubectl", "OperatorProcess", "Phases", "Wait"]

Wait = Callable[[Callable[[], bool], str], None]
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


class Phases:
    """Wall time of named test phases, reported at the end of the session.

    The first run of a phase is reported as cold (first reconcile, caches still empty),
    the later runs as warm.
    """

    def __init__(self) -> None:
        self.runs: dict[str, list[float]] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        self.runs.setdefault(name, []).append(time.monotonic() - started)

    def report(self) -> list[str]:
        lines = [f"{'phase':<44} {'cold s':>7} {'warm s':>7} {'runs':>5}"]
        for name, runs in self.runs.items():
            warm = f"{statistics.median(runs[1:]):7.2f}" if len(runs) > 1 else f"{'-':>7}"
            lines.append(f"{name:<44} {runs[0]:7.2f} {warm} {len(runs):5d}")
        return lines


class OperatorProcess:
    """``specops operator`` as a local process, acting as the identity in ``kubeconfig``.

    Tied to the test process (it dies with it); :meth:`stop` and :meth:`kill` end it.
    """

    def __init__(self, kubeconfig: Path, log: Path) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        """Start it and wait until its liveness endpoint answers."""
        (port,) = free_ports(1)
        health = f"http://127.0.0.1:{port}/healthz"
        specops = Path(sys.executable).with_name("specops")
        # env(1) sets the identity and execs, so the pid (and the death signal) stay.
        identity = ("env", f"KUBECONFIG={self.kubeconfig}")
        argv = (*identity, str(specops), "operator", "--metrics-port=0", f"--liveness={health}")
        self._proc = proc = spawn(argv, self.log, tie_to_parent=True)
        deadline = time.monotonic() + timeout_s
        while not _answers(health):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log.read_text(errors="replace")[-4000:]
                raise AssertionError(f"the operator did not come up; its log ends with:\n{tail}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when a node dies under it."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it is still there after a grace period."""
        self._end(signal.SIGTERM)

    def _end(self, sig: signal.Signals) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
