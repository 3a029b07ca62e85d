"""The runner's state file: where each pod's engine and sidecar, each service's proxy and
Prometheus listen, for load generators and tests to find them."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from specops_lab.podrunner._errors import PodRunnerError

__all__ = ["FailedPod", "PodEndpoints", "RunnerState", "ServiceEndpoint", "read_state"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PodEndpoints(_Frozen):
    """One running pod: its loopback URLs, its engine's speculative config, its processes."""

    namespace: str
    pod: str
    uid: str
    service: str
    node: str
    engine_url: str
    sidecar_url: str | None
    speculative_config: str | None
    ready: bool
    restarts: int
    pids: dict[str, int]


class ServiceEndpoint(_Frozen):
    """The round-robin proxy in front of a service's ready engines."""

    namespace: str
    service: str
    url: str


class FailedPod(_Frozen):
    """A pod the runner could not run, and why."""

    namespace: str
    pod: str
    uid: str
    error: str


class RunnerState(_Frozen):
    prometheus_url: str | None = None
    pods: tuple[PodEndpoints, ...] = ()
    stopping: tuple[PodEndpoints, ...] = ()
    """Pods that went and whose processes are still draining (out of their proxy)."""
    services: tuple[ServiceEndpoint, ...] = ()
    failed: tuple[FailedPod, ...] = ()

    def service_pods(self, namespace: str, service: str) -> tuple[PodEndpoints, ...]:
        return tuple(p for p in self.pods if (p.namespace, p.service) == (namespace, service))

    def service_url(self, namespace: str, service: str) -> str | None:
        for endpoint in self.services:
            if (endpoint.namespace, endpoint.service) == (namespace, service):
                return endpoint.url
        return None

    def write(self, path: Path) -> None:
        """Replace ``path`` atomically, so a reader never sees half a file."""
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(self.model_dump_json(indent=2))
        os.replace(temporary, path)


def read_state(path: Path) -> RunnerState:
    """The state a runner last wrote to ``path``."""
    try:
        return RunnerState.model_validate_json(path.read_text())
    except OSError as exc:
        raise PodRunnerError(f"cannot read the pod runner's state file {path}: {exc}") from exc
    except ValidationError as exc:
        raise PodRunnerError(f"{path}: not a pod runner state file: {exc}") from exc
