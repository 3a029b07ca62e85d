"""Launching specops on this machine, as the demo and the end-to-end tests do: the chart
installed by the Helm library, the operator as a local process with the chart's RBAC
identity, and the pod runner with its Prometheus; and the helpers that start, wait for and
stop such local servers, for benchmarks and integration tests too."""

from specops_lab.launch._chart import CHART_DIR, ChartRelease, installed_chart, operator_kubeconfig
from specops_lab.launch._errors import LaunchError
from specops_lab.launch._process import (
    ALLOW_LOCAL_PROMETHEUS,
    LocalProcess,
    OperatorProcess,
    PodRunnerProcess,
    answers,
    free_ports,
    spawn,
    specops_executable,
    stop_process,
    wait_until_answers,
)

__all__ = [
    "ALLOW_LOCAL_PROMETHEUS",
    "CHART_DIR",
    "ChartRelease",
    "LaunchError",
    "LocalProcess",
    "OperatorProcess",
    "PodRunnerProcess",
    "answers",
    "free_ports",
    "installed_chart",
    "operator_kubeconfig",
    "spawn",
    "specops_executable",
    "stop_process",
    "wait_until_answers",
]
