"""Local processes of the stack (the operator, the pod runner): started in a session of their
own so a Ctrl-C reaches only their owner, tied to it so they never outlive it, waited for
until they answer, and stopped with SIGTERM, then SIGKILL.

The helpers for one process are public too (``spawn`` and ``free_ports`` come from the
control plane's own): benchmarks and integration tests start their own servers (engine,
sidecar, Prometheus) and handle them the same way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx

from specops_lab.cluster import free_ports, spawn
from specops_lab.launch._errors import LaunchError
from specops_lab.podrunner import RunnerState, read_state

__all__ = [
    "ALLOW_LOCAL_PROMETHEUS",
    "LocalProcess",
    "OperatorProcess",
    "PodRunnerProcess",
    "answers",
    "free_ports",
    "spawn",
    "specops_executable",
    "stop_process",
    "wait_until_answers",
]

_LOG_TAIL = 3000


def specops_executable() -> str:
    """The ``specops`` entry point next to this Python (the project's virtual environment)."""
    return str(Path(sys.executable).with_name("specops"))


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 now; no answer at all is a no, not an error."""
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _came_up(ready: Callable[[], bool], process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Poll ``ready`` until it holds; False as soon as ``process`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _why_not_up(process: subprocess.Popen[bytes], timeout_s: float) -> str:
    code = process.poll()
    why = f"exited with status {code}" if code is not None else "did not come up"
    return f"{why} within {timeout_s:.0f} s"


def wait_until_answers(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Wait until ``url`` answers 200; fail at once if ``process``, which serves it, exits."""
    if not _came_up(lambda: answers(url), process, timeout_s):
        raise LaunchError(
            f"{url} never answered: {process.args!r} {_why_not_up(process, timeout_s)}"
        )


def stop_process(
    process: subprocess.Popen[bytes],
    grace_s: float = 10.0,
    sig: signal.Signals = signal.SIGTERM,
) -> None:
    """Send ``sig``, SIGKILL after ``grace_s``, and reap it; one that already exited is only
    reaped."""
    if process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class LocalProcess:
    """One named process with its log; ``start`` waits until ``ready`` holds."""

    def __init__(
        self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = tuple(argv)
        self.log = log
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The process's id while it runs."""
        return self._proc.pid if self.running and self._proc is not None else None

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-_LOG_TAIL:]
        except OSError:
            return "(no log)"

    def start(self, ready: Callable[[], bool], timeout_s: float = 60.0) -> None:
        env_argv: tuple[str, ...] = ()
        if self._env:
            env_argv = ("env", *(f"{k}={v}" for k, v in self._env.items()))
        self._proc = proc = spawn((*env_argv, *self.argv), self.log, tie_to_parent=True)
        if not _came_up(ready, proc, timeout_s):
            why = _why_not_up(proc, timeout_s)
            self.stop()
            raise LaunchError(f"{self.name} {why}; its log {self.log} ends with:\n{self.tail()}")

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM, SIGKILL after ``grace_s``; safe to call twice."""
        self._end(signal.SIGTERM, grace_s)

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when the node under it dies."""
        self._end(signal.SIGKILL)

    def _end(self, sig: signal.Signals, grace_s: float = 20.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, grace_s, sig)


# The pod runner's Prometheus listens on loopback: an operator started here may read it.
ALLOW_LOCAL_PROMETHEUS: tuple[str, ...] = ("--allowed-prometheus=127.0.0.1",)


class OperatorProcess:
    """``specops operator`` acting as the identity in ``kubeconfig`` (e.g. the chart's
    ServiceAccount), with its liveness endpoint on a free loopback port."""

    def __init__(
        self,
        kubeconfig: Path,
        log: Path,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``env``: more of the environment, e.g. the POD_NAME and POD_NAMESPACE the chart's
        Deployment gives each replica."""
        self.kubeconfig = kubeconfig
        (port,) = free_ports(1)
        self.health = f"http://127.0.0.1:{port}/healthz"
        argv = (specops_executable(), "operator", "--metrics-port=0", f"--liveness={self.health}")
        self.process = LocalProcess(
            "the operator",
            (*argv, *extra_args),
            log,
            {"KUBECONFIG": str(kubeconfig), **(env or {})},
        )

    def start(self, timeout_s: float = 60.0) -> None:
        """Start it and wait until its liveness endpoint answers."""
        self.process.start(lambda: answers(self.health), timeout_s)

    def stop(self) -> None:
        self.process.stop()

    def kill(self) -> None:
        """SIGKILL, as when its node dies; :meth:`start` brings it back."""
        self.process.kill()


class PodRunnerProcess:
    """``specops podrunner`` with Prometheus, and the state file it keeps."""

    def __init__(
        self,
        kubeconfig: Path,
        work_dir: Path,
        *,
        truth: str,
        workload: str,
        startup_delay_s: float,
        scrape_interval_s: float = 2.0,
        poll_interval_s: float = 0.5,
    ) -> None:
        self.work_dir = work_dir
        argv = (
            specops_executable(),
            "podrunner",
            f"--kubeconfig={kubeconfig}",
            f"--work-dir={work_dir}",
            f"--truth={truth}",
            f"--workload={workload}",
            f"--startup-delay={startup_delay_s}",
            "--prometheus",
            f"--scrape-interval={scrape_interval_s}",
            f"--poll-interval={poll_interval_s}",
        )
        self.process = LocalProcess("the pod runner", argv, work_dir / "runner.log")

    @property
    def state_file(self) -> Path:
        return self.work_dir / "state.json"

    def state(self) -> RunnerState:
        """What the runner last wrote (empty before its first write)."""
        return read_state(self.state_file) if self.state_file.exists() else RunnerState()

    def start(self, timeout_s: float = 60.0) -> str:
        """Start it and wait for its Prometheus; returns Prometheus's URL."""
        os.makedirs(self.work_dir, exist_ok=True)
        self.process.start(lambda: self.state().prometheus_url is not None, timeout_s)
        url = self.state().prometheus_url
        assert url is not None
        return url

    def stop(self) -> None:
        self.process.stop(grace_s=60.0)
