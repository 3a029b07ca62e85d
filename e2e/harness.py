"""Types and helpers of the e2e fixtures, for test modules to import (two conftest.py files
would clash)."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml
from kubernetes import client

__all__ = ["EXAMPLE", "Kubectl", "Phases", "Wait", "apply", "example", "filled", "plain"]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llama.yaml"


class Wait(Protocol):
    """Poll ``done`` until it holds; fail naming ``what`` (and, when given, what ``explain``
    says of the state then) after ``timeout_s`` or the suite's generous default."""

    def __call__(
        self,
        done: Callable[[], bool],
        what: str,
        *,
        timeout_s: float | None = None,
        explain: Callable[[], str] | None = None,
    ) -> None: ...


Kubectl = Callable[..., subprocess.CompletedProcess[str]]


_T = TypeVar("_T")


def filled(value: _T | None) -> _T:
    """A field the API server fills on what it returns (an object's metadata, spec and
    status; a running pod's node and IP): the client's models type every field optional."""
    assert value is not None
    return value


def plain(api: client.ApiClient, model: object) -> dict[str, Any]:
    """A model of the client as the JSON object the API server sent."""
    found: dict[str, Any] = api.sanitize_for_serialization(model)  # type: ignore[no-untyped-call]
    return found


def example(namespace: str) -> dict[str, Any]:
    """The README's example SpeculativeService, placed in ``namespace``."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["namespace"] = namespace
    return doc


def apply(kubectl: Kubectl, directory: Path, doc: dict[str, Any]) -> None:
    """``kubectl apply`` of ``doc``, as a user would, through a file in ``directory``."""
    path = directory / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    kubectl("apply", "-f", str(path))


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
