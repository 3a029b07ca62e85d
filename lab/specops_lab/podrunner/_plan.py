"""Desired against running: which pods to start, stop or restart (level-based, pure).

Each pass compares the pods the API server reports with the processes the runner holds,
so a missed event or a runner restart does no harm. A pod is wanted while it is scheduled
on one of the fake nodes, carries the ``specops.io/service`` label and is neither
terminating nor finished. A pod whose processes died is restarted after a doubling
back-off, as the kubelet restarts a crashing container. A pod's readiness goes back to
the API server as the ``specops.io/engine-ready`` annotation, which kwok's stages turn
into the pod's Ready condition (see ``specops_lab.cluster``).

A pod that goes stops as the kubelet stops it (``stop_times``): each container's preStop
hook first, SIGTERM when the hook ends, SIGKILL when the pod's grace period ends. Then, and
only then, the runner deletes the Terminating pod for good (``released_pods``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from specops_lab.cluster import ENGINE_READY_ANNOTATION
from specops_lab.podrunner._pods import Pod, PodKey

__all__ = [
    "EXIT_STOP",
    "Actions",
    "ProbeState",
    "Running",
    "StopTimes",
    "plan_actions",
    "probed",
    "readiness_marks",
    "released_pods",
    "restart_backoff_s",
    "startable_pods",
    "stop_times",
    "wanted_pods",
]

_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
_BACKOFF_BASE_S = 5.0
_BACKOFF_MAX_S = 300.0
# The kubelet's one-off extension for a preStop hook still running when the grace period ends.
_HOOK_OVERRUN_S = 2.0


@dataclass(frozen=True)
class Running:
    """What the runner holds for one pod: whether all its processes live, and since when
    (monotonic seconds) one has been dead."""

    alive: bool
    exited_at: float | None = None
    restarts: int = 0


@dataclass(frozen=True)
class Actions:
    start: tuple[PodKey, ...] = ()
    stop: tuple[PodKey, ...] = ()
    restart: tuple[PodKey, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.start or self.stop or self.restart)


@dataclass(frozen=True)
class StopTimes:
    """When a stopping container gets SIGTERM and SIGKILL, in seconds after its pod went."""

    term_after_s: float
    kill_after_s: float


# The runner itself exiting: its proxies are closed already, so there is nothing to drain.
EXIT_STOP = StopTimes(term_after_s=0.0, kill_after_s=10.0)


def stop_times(pre_stop_s: float, grace_s: float) -> StopTimes:
    """The kubelet's order for one container: its preStop hook runs first, SIGTERM follows
    when the hook ends, SIGKILL when the pod's grace period ends; a hook that overruns the
    grace period is cut there, and the container gets 2 s more."""
    if pre_stop_s < grace_s:
        return StopTimes(term_after_s=pre_stop_s, kill_after_s=grace_s)
    return StopTimes(term_after_s=grace_s, kill_after_s=grace_s + _HOOK_OVERRUN_S)


@dataclass(frozen=True)
class ProbeState:
    """A container's readiness as the kubelet keeps it: Ready after a success, and not Ready
    again only after ``failureThreshold`` failures in a row, so one slow answer on a busy
    node does not take the pod out of its Service."""

    ready: bool = False
    failures: int = 0


def probed(state: ProbeState, ok: bool, failure_threshold: int) -> ProbeState:
    """The state after one probe."""
    if ok:
        return ProbeState(ready=True)
    failures = state.failures + 1
    return ProbeState(ready=state.ready and failures < failure_threshold, failures=failures)


def wanted_pods(pods: Iterable[Pod], nodes: Collection[str]) -> dict[PodKey, Pod]:
    """The pods that should have processes: labelled, on one of ``nodes``, not going away."""
    return {
        pod.key: pod
        for pod in pods
        if pod.service is not None
        and pod.spec.node_name in nodes
        and pod.metadata.deletion_timestamp is None
        and pod.status.phase not in _FINISHED_PHASES
    }


def startable_pods(
    claimed: Mapping[PodKey, Pod], holding: Collection[PodKey], busy_ips: Collection[str]
) -> dict[PodKey, Pod]:
    """The claimed pods to hold processes for: those held already, and those kwok has given
    an address that no other pod's processes still listen on (``busy_ips``: one going away,
    or draining)."""
    return {
        key: pod
        for key, pod in claimed.items()
        if key in holding or (pod.status.pod_ip is not None and pod.status.pod_ip not in busy_ips)
    }


def restart_backoff_s(restarts: int) -> float:
    """Seconds to wait before restarting a pod's processes for the ``restarts``+1-th time."""
    return float(min(_BACKOFF_BASE_S * 2**restarts, _BACKOFF_MAX_S))


def plan_actions(
    wanted: Collection[PodKey], running: Mapping[PodKey, Running], now: float
) -> Actions:
    """Start what is wanted and not held, stop what is held and no longer wanted, restart
    what is wanted but dead once its back-off has passed."""
    restart = tuple(
        sorted(
            key
            for key, state in running.items()
            if key in wanted
            and not state.alive
            and state.exited_at is not None
            and now - state.exited_at >= restart_backoff_s(state.restarts)
        )
    )
    return Actions(
        start=tuple(sorted(set(wanted) - set(running))),
        stop=tuple(sorted(set(running) - set(wanted))),
        restart=restart,
    )


def readiness_marks(
    pods: Iterable[Pod], ready: Mapping[PodKey, bool]
) -> tuple[tuple[PodKey, bool], ...]:
    """The pods whose ``specops.io/engine-ready`` annotation differs from what their probes
    say (``ready``), with the value to write. A pod without the annotation gets one at
    once, "false" while its engine loads: that claims it, so kwok waits for the runner
    instead of making it Ready by itself. Pods not in ``ready`` are left alone."""
    return tuple(
        sorted(
            (pod.key, ready[pod.key])
            for pod in pods
            if pod.key in ready
            and pod.metadata.annotations.get(ENGINE_READY_ANNOTATION)
            != ("true" if ready[pod.key] else "false")
        )
    )


def released_pods(
    pods: Iterable[Pod], nodes: Collection[str], holding: Collection[PodKey]
) -> tuple[PodKey, ...]:
    """The Terminating pods to delete for good: claimed by a runner (annotated), on one of
    ``nodes``, and with no process of theirs left (not in ``holding``, the pods the runner
    runs or is still stopping)."""
    return tuple(
        sorted(
            pod.key
            for pod in pods
            if pod.metadata.deletion_timestamp is not None
            and pod.spec.node_name in nodes
            and ENGINE_READY_ANNOTATION in pod.metadata.annotations
            and pod.key not in holding
        )
    )
