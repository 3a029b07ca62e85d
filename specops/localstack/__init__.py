"""The parts of a local specops stack that the demo and the end-to-end tests share: the chart
installed by the Helm library, the operator as a local process with the chart's RBAC
identity, and the pod runner with its Prometheus."""

from specops.localstack._chart import CHART_DIR, ChartRelease, installed_chart, operator_kubeconfig
from specops.localstack._errors import LocalStackError
from specops.localstack._process import (
    LocalProcess,
    OperatorProcess,
    PodRunnerProcess,
    specops_executable,
)

__all__ = [
    "CHART_DIR",
    "ChartRelease",
    "LocalProcess",
    "LocalStackError",
    "OperatorProcess",
    "PodRunnerProcess",
    "installed_chart",
    "operator_kubeconfig",
    "specops_executable",
]
