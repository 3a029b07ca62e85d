"""Fixtures for every tier: the pinned vLLM wheel, and the loopback guard
(``tests/netguard.py``).

``scripts/bootstrap`` fetches the wheel into the cache (``pip download``, once); a run
without it fetches it in the first test that needs it, so a fresh machine runs those
tests instead of skipping them.

Every test marked ``integration`` or ``e2e`` starts real processes; while it runs, every
TCP connection of the pytest process and its descendants is checked, and the test fails if
one reaches an address off loopback. The session's summary says how many were checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from specops.vllm import ensure_wheel
from tests.netguard import LoopbackGuard

_GUARDED_MARKS = ("integration", "e2e")
_guard = LoopbackGuard()


@pytest.fixture(scope="session")
def vllm_wheel() -> Path:
    """The pinned vLLM wheel, downloaded into the cache first if it is not there."""
    return ensure_wheel()


@pytest.fixture(scope="session")
def loopback_guard() -> Iterator[LoopbackGuard]:
    """The session's guard, sampling in the background: what it checked, for tests to read."""
    with _guard.watching():
        yield _guard


@pytest.fixture(autouse=True)
def loopback_only(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test whose processes connected anywhere but 127.0.0.0/8 or ::1."""
    if not any(request.node.get_closest_marker(mark) for mark in _GUARDED_MARKS):
        yield
        return
    guard: LoopbackGuard = request.getfixturevalue("loopback_guard")
    before = set(guard.violations)
    guard.sample()
    yield
    guard.sample()
    found = guard.violations_since(before)
    if found:
        pytest.fail("connections off loopback:\n" + "\n".join(found), pytrace=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _guard.processes:
        return
    ips = sorted(_guard.remote_ips)
    shown = ", ".join(ips[:12]) + (f" and {len(ips) - 12} more" if len(ips) > 12 else "")
    terminalreporter.write_line(
        f"loopback guard: {len(_guard.checked)} connections of {len(_guard.processes)} "
        f"processes checked, {len(_guard.violations)} off loopback; remote addresses: {shown}"
    )
