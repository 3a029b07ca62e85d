"""The part of a Pod the runner reads, and Kubernetes' own rules for a container's env and args.

Pods arrive as the API server's JSON and are validated into frozen models here, at the
edge; everything after works on these. ``$(VAR)`` expansion and ``fieldRef`` resolution
follow the kubelet, so a sidecar arg such as ``--pod $(POD_NAME)`` becomes the pod's name
exactly as it would on a real node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specops_lab.cluster import SERVED_POD_LABEL
from specops_lab.podrunner._errors import PodRunnerError

__all__ = [
    "SERVICE_LABEL",
    "Container",
    "Pod",
    "PodKey",
    "container_env",
    "expand",
    "parse_pod",
]

# The label kwok's stages key on too: pods carrying it get their readiness from the runner.
SERVICE_LABEL = SERVED_POD_LABEL

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_LABEL_REF = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class _FieldRef(_Model):
    field_path: str = Field(alias="fieldPath")


class _ValueFrom(_Model):
    field_ref: _FieldRef | None = Field(default=None, alias="fieldRef")


class EnvVar(_Model):
    name: str
    value: str | None = None
    value_from: _ValueFrom | None = Field(default=None, alias="valueFrom")


class _SleepAction(_Model):
    seconds: int = Field(ge=0)


class _Handler(_Model):
    sleep: _SleepAction | None = None


class _Lifecycle(_Model):
    pre_stop: _Handler | None = Field(default=None, alias="preStop")


class ReadinessProbe(_Model):
    """The readiness probe's timing, with the kubelet's defaults."""

    timeout_s: int = Field(default=1, ge=1, alias="timeoutSeconds")
    failure_threshold: int = Field(default=3, ge=1, alias="failureThreshold")


class Container(_Model):
    name: str
    image: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    lifecycle: _Lifecycle | None = None
    readiness_probe: ReadinessProbe = Field(default_factory=ReadinessProbe, alias="readinessProbe")

    @property
    def pre_stop_sleep_s(self) -> float:
        """Seconds of the container's ``preStop`` sleep action: the kubelet runs it before
        SIGTERM. Other hooks (exec, httpGet) have nothing to run against here: 0."""
        hook = self.lifecycle.pre_stop if self.lifecycle is not None else None
        return float(hook.sleep.seconds) if hook is not None and hook.sleep is not None else 0.0


class _Metadata(_Model):
    name: str
    namespace: str
    uid: str
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    deletion_timestamp: str | None = Field(default=None, alias="deletionTimestamp")


class _Spec(_Model):
    node_name: str | None = Field(default=None, alias="nodeName")
    containers: tuple[Container, ...]
    termination_grace_period_seconds: int = Field(
        default=30, ge=0, alias="terminationGracePeriodSeconds"
    )


class _Status(_Model):
    phase: str | None = None
    pod_ip: str | None = Field(default=None, alias="podIP")


class Pod(_Model):
    """A Pod as far as the runner cares: identity, labels, node, containers (with their
    preStop sleeps), grace period, phase and IP."""

    metadata: _Metadata
    spec: _Spec
    status: _Status = _Status()

    @property
    def key(self) -> PodKey:
        return PodKey(self.metadata.namespace, self.metadata.name, self.metadata.uid)

    @property
    def service(self) -> str | None:
        return self.metadata.labels.get(SERVICE_LABEL)


@dataclass(frozen=True, order=True)
class PodKey:
    """A pod's identity; the uid tells a replaced pod from its namesake."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_pod(obj: Mapping[str, Any]) -> Pod:
    """Validate one Pod object from the API server."""
    try:
        return Pod.model_validate(obj)
    except ValidationError as exc:
        name = obj.get("metadata", {}).get("name", "?")
        raise PodRunnerError(f"pod {name}: not a pod the runner can read: {exc}") from exc


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: known names are replaced, ``$$`` is a ``$``,
    unknown references stay as written."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return env.get(name, match.group(0))

    return _VAR.sub(one, text)


def _field(pod: Pod, path: str) -> str | None:
    simple = {
        "metadata.name": pod.metadata.name,
        "metadata.namespace": pod.metadata.namespace,
        "metadata.uid": pod.metadata.uid,
        "spec.nodeName": pod.spec.node_name,
    }
    if path in simple:
        return simple[path]
    match = _LABEL_REF.fullmatch(path)
    if match is None:
        return None
    source = pod.metadata.labels if match.group(1) == "labels" else pod.metadata.annotations
    return source.get(match.group(2))


def container_env(pod: Pod, container: Container) -> dict[str, str]:
    """The variables the kubelet would set that the runner can know: literal values (expanded
    against earlier ones) and ``fieldRef``s to the pod's metadata; secrets are left out."""
    env: dict[str, str] = {}
    for var in container.env:
        if var.value is not None:
            env[var.name] = expand(var.value, env)
        elif var.value_from is not None and var.value_from.field_ref is not None:
            value = _field(pod, var.value_from.field_ref.field_path)
            if value is not None:
                env[var.name] = value
    return env
