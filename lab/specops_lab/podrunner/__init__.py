"""Pods that do something: the local cluster's specops pods run as simulated engines.

kwok's fake nodes run nothing. The pod runner gives each scheduled pod of a
SpeculativeService local processes built from the pod's own containers (``vllm serve``
becomes ``specops sim serve`` with the same flags; the sidecar keeps its own), a
Prometheus file_sd target per process labelled with the pod's namespace and name, and a
round-robin proxy per service, and stops them when the pod goes, as the kubelet does
(preStop, SIGTERM, SIGKILL at the end of the grace period). Its probes decide when kwok
marks a pod Ready (the ``specops.io/engine-ready`` annotation).
"""

from specops_lab.podrunner._errors import PodRunnerError
from specops_lab.podrunner._kube import KubePodSource
from specops_lab.podrunner._plan import (
    EXIT_STOP,
    Actions,
    ProbeState,
    Running,
    StopTimes,
    plan_actions,
    probed,
    readiness_marks,
    released_pods,
    restart_backoff_s,
    startable_pods,
    stop_times,
    wanted_pods,
)
from specops_lab.podrunner._pods import (
    SERVICE_LABEL,
    Container,
    Pod,
    PodKey,
    container_env,
    expand,
    parse_pod,
)
from specops_lab.podrunner._prometheus import JOB_NAME, file_sd_targets, prometheus_config
from specops_lab.podrunner._runner import (
    PodRunner,
    PodSource,
    RunnerOptions,
    default_specops_command,
)
from specops_lab.podrunner._state import (
    FailedPod,
    PodEndpoints,
    RunnerState,
    ServiceEndpoint,
    read_state,
)
from specops_lab.podrunner._translate import (
    ENGINE_DEFAULT_PORT,
    STARTUP_DELAY_ANNOTATION,
    TRUTH_ANNOTATION,
    WORKLOAD_ANNOTATION,
    PodLaunch,
    ProcessSpec,
    SimOptions,
    launch_plan,
)

__all__ = [
    "ENGINE_DEFAULT_PORT",
    "EXIT_STOP",
    "JOB_NAME",
    "SERVICE_LABEL",
    "STARTUP_DELAY_ANNOTATION",
    "TRUTH_ANNOTATION",
    "WORKLOAD_ANNOTATION",
    "Actions",
    "Container",
    "FailedPod",
    "KubePodSource",
    "Pod",
    "PodEndpoints",
    "PodKey",
    "PodLaunch",
    "PodRunner",
    "PodRunnerError",
    "PodSource",
    "ProbeState",
    "ProcessSpec",
    "RunnerOptions",
    "RunnerState",
    "Running",
    "ServiceEndpoint",
    "SimOptions",
    "StopTimes",
    "container_env",
    "default_specops_command",
    "expand",
    "file_sd_targets",
    "launch_plan",
    "parse_pod",
    "plan_actions",
    "probed",
    "prometheus_config",
    "read_state",
    "readiness_marks",
    "released_pods",
    "restart_backoff_s",
    "startable_pods",
    "stop_times",
    "wanted_pods",
]
