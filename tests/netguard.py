"""A guard that no process a test started talks to anything but loopback.

While a test that starts processes runs, a thread samples the kernel's TCP tables
(``/proc/net/tcp`` and ``tcp6``) and attributes each socket to a process by its inode,
among the pytest process and all its descendants (``psutil``). Every connection of theirs
with a remote end (an established connection, or one being set up or torn down) is
checked: its remote address must be in 127.0.0.0/8 or ``::1`` (an IPv4-mapped loopback
address too). The fixture in the root ``conftest.py`` fails the test that saw one that is
not, naming the process, both ends and the TCP state.

Sampling every ``interval_s`` (half a second: the kernel takes about 15 ms to list its
tables on a busy machine) sees every connection that lives longer than that, which is every
HTTP connection kept alive by a client pool and every attempt that waits for an answer from
an address off the machine; a connection opened and closed between two samples may slip
through.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = [
    "Connection",
    "LoopbackGuard",
    "connections",
    "is_loopback",
    "parse_tcp_table",
]

# /proc/net/tcp's state codes (include/net/tcp_states.h): only LISTEN has no remote end.
_TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
    "0C": "NEW_SYN_RECV",
}


@dataclass(frozen=True)
class Connection:
    """One TCP socket with a remote end, as the kernel lists it."""

    local: str
    remote: str
    state: str
    inode: int

    @property
    def remote_ip(self) -> str:
        return self.remote.rsplit(":", 1)[0].strip("[]")


def _address(hex_address: str) -> str:
    """``0100007F:1F90`` (IPv4) or the 32-digit IPv6 form, as ``127.0.0.1:8080`` / ``[::1]:80``.

    The kernel prints each 32-bit word of the address in host (little-endian) order."""
    ip_hex, port_hex = hex_address.split(":")
    raw = bytes.fromhex(ip_hex)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    port = int(port_hex, 16)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def parse_tcp_table(text: str) -> list[Connection]:
    """The sockets of one ``/proc/net/tcp``-format table that have a remote end."""
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        # Listening sockets have no remote end; inode 0 (TIME_WAIT) belongs to no process.
        if len(fields) < 10 or fields[3] == "0A" or fields[9] == "0":
            continue
        found.append(
            Connection(
                local=_address(fields[1]),
                remote=_address(fields[2]),
                state=_TCP_STATES.get(fields[3], fields[3]),
                inode=int(fields[9]),
            )
        )
    return found


def is_loopback(ip: str) -> bool:
    """127.0.0.0/8, ``::1``, or either written as an IPv4-mapped IPv6 address."""
    address = ipaddress.ip_address(ip)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def connections() -> list[Connection]:
    """Every TCP socket with a remote end in this network namespace."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            found += parse_tcp_table(Path(table).read_text())
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def _family(root: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return [root, *root.children(recursive=True)]
    return [root]


def _describe(process: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return f"pid {process.pid} ({' '.join(process.cmdline())[:160]})"
    return f"pid {process.pid}"


@dataclass
class LoopbackGuard:
    """Samples the connections of ``root`` (default: this process) and its descendants."""

    interval_s: float = 0.5
    root_pid: int = field(default_factory=os.getpid)
    checked: set[tuple[int, str, str]] = field(default_factory=set)
    remote_ips: set[str] = field(default_factory=set)
    processes: set[int] = field(default_factory=set)
    violations: dict[tuple[int, str, str], str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sample(self) -> None:
        """One look: attribute every connection to one of our processes, check each."""
        listed = connections()
        if not listed:
            return
        by_inode = {c.inode: c for c in listed}
        for process in _family(psutil.Process(self.root_pid)):
            owned = _socket_inodes(process.pid) & by_inode.keys()
            with self._lock:
                self.processes.add(process.pid)
            for inode in owned:
                self._check(process, by_inode[inode])

    def _check(self, process: psutil.Process, connection: Connection) -> None:
        key = (process.pid, connection.local, connection.remote)
        with self._lock:
            if key in self.checked:
                return
            self.checked.add(key)
            self.remote_ips.add(connection.remote_ip)
        if not is_loopback(connection.remote_ip):
            text = (
                f"{_describe(process)}: {connection.local} -> {connection.remote} "
                f"({connection.state})"
            )
            with self._lock:
                self.violations[key] = text

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Sample in a background thread for the duration of the block, and once at its end."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self.interval_s):
                self.sample()

        thread = threading.Thread(target=loop, name="loopback-guard", daemon=True)
        self.sample()
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            self.sample()

    def violations_since(self, seen: Iterable[tuple[int, str, str]]) -> list[str]:
        """What went off loopback, apart from the ``seen`` connections reported before."""
        reported = set(seen)
        with self._lock:
            return [text for key, text in self.violations.items() if key not in reported]
