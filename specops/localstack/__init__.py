"""The parts of a local specops stack that the demo and the end-to-end tests share: the chart
installed by the Helm library, the operator as a local process with the chart's RBAC
identity, and the pod runner with its Prometheus; and the helpers that start, wait for and
stop such local servers, for benchmarks and integration tests too."""

from specops.localstack._chart import CHART_DIR, ChartRelease, installed_chart, operator_kubeconfig
from specops.localstack._errors import LocalStackError
from specops.localstack._process import (
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
    "CHART_DIR",
    "ChartRelease",
    "LocalProcess",
    "LocalStackError",
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
