"""Starting, watching and stopping the control plane's processes (Linux).

Each process runs in a session of its own, so a Ctrl-C in the terminal reaches only
the Python that owns it, which then stops them in order. Processes started for a
test session can also be tied to their parent with ``PR_SET_PDEATHSIG``, so even a
killed pytest leaves no process behind (only a run directory, pruned later). A pid
is only ever signalled after checking that it still runs the executable recorded
for it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from contextlib import ExitStack, suppress
from functools import partial
from pathlib import Path

__all__ = ["free_ports", "is_running", "spawn", "stop_all"]

_PR_SET_PDEATHSIG = 1


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free a moment ago (all bound at once)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _die_with_parent() -> None:
    """SIGKILL, not SIGTERM: all processes get it at once, and an API server told to shut
    down gracefully after etcd has already gone waits for etcd forever."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(argv: tuple[str, ...], log: Path, *, tie_to_parent: bool) -> subprocess.Popen[bytes]:
    """Start ``argv`` detached from the terminal, stdout and stderr appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if tie_to_parent else None,
        )


def is_running(pid: int, executable: str) -> bool:
    """Whether ``pid`` is alive, not a zombie, and still runs ``executable``."""
    proc = Path("/proc") / str(pid)
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except (OSError, IndexError):
        return False
    return state != "Z" and argv0 == executable


def _signal(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(alive: Callable[[], bool], timeout_s: float) -> bool:
    """Poll until ``alive`` is false; whether that happened within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def stop_all(
    processes: list[tuple[int, str]],
    reap: Callable[[int], None] = lambda pid: None,
    grace_s: float = 10.0,
) -> None:
    """Stop ``(pid, executable)`` pairs one by one in the given order: SIGTERM, then SIGKILL.

    ``reap`` collects a child's exit status when this process is its parent.
    """
    for pid, executable in processes:
        if not is_running(pid, executable):
            reap(pid)
            continue
        for sig in (signal.SIGTERM, signal.SIGKILL):
            _signal(pid, sig)
            if _wait_gone(partial(_still_running, pid, executable, reap), grace_s):
                break


def _still_running(pid: int, executable: str, reap: Callable[[int], None]) -> bool:
    reap(pid)
    return is_running(pid, executable)
