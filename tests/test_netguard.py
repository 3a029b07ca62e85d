"""The loopback guard reads the kernel's TCP tables right and flags what leaves loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import netguard
from tests.netguard import Connection, LoopbackGuard, is_loopback, parse_tcp_table

_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  ..."


def _row(local: str, remote: str, state: str, inode: int) -> str:
    return f"   0: {local} {remote} {state} 00000000:00000000 00:00000000 00000000 0 0 {inode} 1"


def test_the_tcp_tables_are_read_as_the_kernel_writes_them() -> None:
    table = "\n".join(
        [
            _HEADER,
            _row("0100007F:1F90", "00000000:0000", "0A", 11),  # listening: no remote end
            _row("0100007F:A000", "0100007F:1F90", "01", 12),
            _row("0200017F:B000", "0100000A:2382", "02", 13),
        ]
    )
    assert parse_tcp_table(table) == [
        Connection("127.0.0.1:40960", "127.0.0.1:8080", "ESTABLISHED", 12),
        Connection("127.1.0.2:45056", "10.0.0.1:9090", "SYN_SENT", 13),
    ]
    six = "\n".join(
        [
            _HEADER,
            _row("0" * 24 + "01000000:1F90", "0" * 24 + "01000000:C000", "01", 21),
            _row("0" * 24 + "01000000:1F91", "0000000000000000FFFF00000100000A:2382", "01", 22),
        ]
    )
    assert [(c.remote, c.remote_ip) for c in parse_tcp_table(six)] == [
        ("[::1]:49152", "::1"),
        ("[::ffff:a00:1]:9090", "::ffff:a00:1"),
    ]


@pytest.mark.parametrize(
    ("ip", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.0.0", True),
        ("127.255.255.254", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("10.96.0.1", False),
        ("192.168.1.1", False),
        ("::ffff:10.0.0.1", False),
        ("2001:db8::1", False),
    ],
)
def test_only_loopback_passes(ip: str, loopback: bool) -> None:
    assert is_loopback(ip) is loopback


def test_a_connection_off_loopback_is_flagged_with_its_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A socket of this process, listed as the kernel would list one dialling a fake pod IP;
    # no packet goes anywhere.
    with socket.socket() as sock:
        inode = os.fstat(sock.fileno()).st_ino
        fake = Connection("192.0.2.9:40000", "10.0.0.1:9090", "SYN_SENT", inode)
        monkeypatch.setattr(netguard, "connections", lambda: [fake])
        guard = LoopbackGuard()
        guard.sample()
    (text,) = guard.violations_since(())
    assert f"pid {os.getpid()}" in text
    assert "192.0.2.9:40000 -> 10.0.0.1:9090 (SYN_SENT)" in text
    assert guard.violations_since(guard.violations) == []


@pytest.mark.integration
def test_a_child_processes_loopback_connection_is_checked_and_passes(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        ready = tmp_path / "connected"
        script = (
            "import socket, sys, time, pathlib\n"
            f"s = socket.create_connection(('127.0.0.1', {port}))\n"
            f"pathlib.Path({str(ready)!r}).touch()\n"
            "time.sleep(30)\n"
        )
        child = subprocess.Popen([sys.executable, "-c", script])
        try:
            accepted, _ = server.accept()
            with accepted:
                for _ in range(100):
                    if ready.exists():
                        break
                    subprocess.run(["sleep", "0.05"], check=True)
                guard = LoopbackGuard()
                guard.sample()
        finally:
            child.kill()
            child.wait()
    remotes = {(pid, remote) for pid, _, remote in guard.checked}
    assert (child.pid, f"127.0.0.1:{port}") in remotes
    assert child.pid in guard.processes
    assert not guard.violations
