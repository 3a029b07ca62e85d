"""A pod's own containers, translated into the local processes that stand in for them.

The engine container's ``vllm serve ...`` becomes ``specops sim serve ...`` with the same
arguments, so the ``--speculative-config`` the operator wrote is the one the simulated
engine runs; only ``--host`` changes, to the pod's own IP (kwok hands pods loopback
addresses, 127.0.0.0/8), so the engine listens where a real pod's would: pod IP, the
container's ``--port`` (vLLM's default 8000). The sidecar's ``specops sidecar ...`` keeps
its arguments too (its port, 9090 by default), on the pod's IP, with ``--engine-url``
pointed at the pod's engine. What the
simulation needs beyond vLLM's flags (the engine's truth, workload, load delay) comes from
the runner's options, overridden per pod by annotations.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from specops.vllm import flag_value
from specops_lab.podrunner._errors import PodRunnerError
from specops_lab.podrunner._pods import (
    Container,
    Pod,
    PodKey,
    ReadinessProbe,
    container_env,
    expand,
)
from specops_lab.sim import DEFAULT_TRUTH

__all__ = [
    "STARTUP_DELAY_ANNOTATION",
    "TRUTH_ANNOTATION",
    "WORKLOAD_ANNOTATION",
    "PodLaunch",
    "ProcessSpec",
    "SimOptions",
    "launch_plan",
]

TRUTH_ANNOTATION = "specops.io/sim-truth"
WORKLOAD_ANNOTATION = "specops.io/sim-workload"
STARTUP_DELAY_ANNOTATION = "specops.io/sim-startup-delay"
LOOPBACK = "127.0.0.1"
# The ports the containers listen on when their args name none: vLLM's and the sidecar's.
ENGINE_DEFAULT_PORT = 8000
SIDECAR_DEFAULT_PORT = 9090

# Ways a container can start vLLM's OpenAI server; the image's entrypoint is the last one.
_ENGINE_PREFIXES: tuple[tuple[str, ...], ...] = (
    ("vllm", "serve"),
    ("python3", "-m", "vllm.entrypoints.openai.api_server"),
    ("python", "-m", "vllm.entrypoints.openai.api_server"),
)
_SIDECAR_PREFIX = ("specops", "sidecar")

Role = Literal["engine", "sidecar"]


@dataclass(frozen=True)
class SimOptions:
    """What the simulated engine needs that vLLM's flags do not say."""

    truth: str = DEFAULT_TRUTH
    workload: str = "sharegpt"
    startup_delay_s: float = 0.0

    def for_pod(self, annotations: Mapping[str, str]) -> SimOptions:
        """These options with the pod's ``specops.io/sim-*`` annotations applied."""
        delay = self.startup_delay_s
        text = annotations.get(STARTUP_DELAY_ANNOTATION)
        if text is not None:
            try:
                delay = float(text)
            except ValueError:
                delay = -1.0
            if not delay >= 0.0:
                raise PodRunnerError(
                    f"annotation {STARTUP_DELAY_ANNOTATION}: {text!r} is not a number of "
                    "seconds >= 0"
                )
        return replace(
            self,
            truth=annotations.get(TRUTH_ANNOTATION, self.truth),
            workload=annotations.get(WORKLOAD_ANNOTATION, self.workload),
            startup_delay_s=delay,
        )


@dataclass(frozen=True)
class ProcessSpec:
    """One local process standing in for one of the pod's containers."""

    container: str
    role: Role
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    host: str
    port: int
    health_path: str
    pre_stop_s: float = 0.0
    probe: ReadinessProbe = field(default_factory=ReadinessProbe)

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"


@dataclass(frozen=True)
class PodLaunch:
    """Everything needed to run one pod locally."""

    key: PodKey
    service: str
    node: str
    engine: ProcessSpec
    sidecar: ProcessSpec | None
    speculative_config: str | None
    grace_s: float = 30.0
    """The pod's terminationGracePeriodSeconds."""

    @property
    def processes(self) -> tuple[ProcessSpec, ...]:
        return (self.engine,) if self.sidecar is None else (self.engine, self.sidecar)


def _strip_prefix(
    tokens: Sequence[str], prefixes: Iterable[tuple[str, ...]]
) -> tuple[str, ...] | None:
    for prefix in prefixes:
        if tuple(tokens[: len(prefix)]) == prefix:
            return tuple(tokens[len(prefix) :])
    return None


def _without(tokens: Sequence[str], flags: frozenset[str]) -> tuple[str, ...]:
    """``tokens`` with every ``--flag value`` and ``--flag=value`` of ``flags`` removed."""
    kept: list[str] = []
    skip_value = False
    for token in tokens:
        if skip_value:
            skip_value = False
        elif token in flags:
            skip_value = True
        elif token.partition("=")[0] not in flags:
            kept.append(token)
    return tuple(kept)


def _role_args(pod: Pod, container: Container, role: Role) -> tuple[str, ...] | None:
    """The container's arguments after its ``vllm serve``/``specops sidecar`` command, if it
    runs that; ``$(VAR)`` references expanded as the kubelet would."""
    env = container_env(pod, container)
    tokens = tuple(expand(t, env) for t in (*container.command, *container.args))
    if role == "sidecar":
        return _strip_prefix(tokens, (_SIDECAR_PREFIX,))
    if not container.command and "vllm" in container.image:
        # The vllm/vllm-openai image's entrypoint runs the API server; args are its flags.
        return tokens
    return _strip_prefix(tokens, _ENGINE_PREFIXES)


def _one(pod: Pod, role: Role, required: bool) -> tuple[Container, tuple[str, ...]] | None:
    found = [(c, a) for c in pod.spec.containers if (a := _role_args(pod, c, role)) is not None]
    if len(found) > 1 or (required and not found):
        command = "vllm serve" if role == "engine" else "specops sidecar"
        names = ", ".join(c.name for c, _ in found) or "none"
        raise PodRunnerError(
            f"pod {pod.key}: expected {'exactly' if required else 'at most'} one container "
            f"running `{command}`, found {names}"
        )
    return found[0] if found else None


def _loopback_ip(pod: Pod) -> str:
    """The pod's IP, which must be on loopback: the runner serves the pod there."""
    ip = pod.status.pod_ip
    if ip is None:
        raise PodRunnerError(f"pod {pod.key}: has no IP yet")
    try:
        loopback = ipaddress.ip_address(ip).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise PodRunnerError(
            f"pod {pod.key}: its IP {ip} is not on loopback (127.0.0.0/8); the runner serves "
            "pods only on this machine: give the fake nodes loopback podCIDRs"
        )
    return ip


def _port(pod: Pod, args: Sequence[str], default: int) -> int:
    text = flag_value(args, "--port")
    if text is None:
        return default
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise PodRunnerError(f"pod {pod.key}: --port {text!r} is not a port number")
    return int(text)


def launch_plan(pod: Pod, sim: SimOptions, specops: Sequence[str]) -> PodLaunch:
    """The processes for ``pod``, on its own IP: its engine container under the simulated
    engine and, if it has one, its sidecar; ``specops`` is how to invoke the ``specops``
    command."""
    if pod.service is None or pod.spec.node_name is None:
        raise PodRunnerError(f"pod {pod.key}: needs the specops.io/service label and a node")
    host = _loopback_ip(pod)
    found = _one(pod, "engine", required=True)
    assert found is not None
    engine_container, engine_args = found
    options = sim.for_pod(pod.metadata.annotations)
    engine_port = _port(pod, engine_args, ENGINE_DEFAULT_PORT)
    engine = ProcessSpec(
        container=engine_container.name,
        role="engine",
        argv=(
            *specops,
            "sim",
            "serve",
            *_without(engine_args, frozenset({"--host", "--port"})),
            *("--host", host, "--port", str(engine_port)),
            *("--truth", options.truth, "--workload", options.workload),
            *("--startup-delay", str(options.startup_delay_s)),
        ),
        env=tuple(sorted(container_env(pod, engine_container).items())),
        host=host,
        port=engine_port,
        health_path="/health",
        pre_stop_s=engine_container.pre_stop_sleep_s,
        probe=engine_container.readiness_probe,
    )
    sidecar = None
    found_sidecar = _one(pod, "sidecar", required=False)
    if found_sidecar is not None:
        container, args = found_sidecar
        sidecar_port = _port(pod, args, SIDECAR_DEFAULT_PORT)
        if sidecar_port == engine_port:
            raise PodRunnerError(f"pod {pod.key}: engine and sidecar both on port {engine_port}")
        sidecar = ProcessSpec(
            container=container.name,
            role="sidecar",
            argv=(
                *specops,
                "sidecar",
                *_without(args, frozenset({"--engine-url", "--host", "--port"})),
                *("--engine-url", engine.url, "--host", host, "--port", str(sidecar_port)),
            ),
            env=tuple(sorted(container_env(pod, container).items())),
            host=host,
            port=sidecar_port,
            health_path="/healthz",
            pre_stop_s=container.pre_stop_sleep_s,
            probe=container.readiness_probe,
        )
    return PodLaunch(
        key=pod.key,
        service=pod.service,
        node=pod.spec.node_name,
        engine=engine,
        sidecar=sidecar,
        speculative_config=flag_value(engine_args, "--speculative-config"),
        grace_s=float(pod.spec.termination_grace_period_seconds),
    )
