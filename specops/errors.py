"""The error tree of specops, one base per boundary.

SpecopsError
├── SpecValidationError   a SpeculativeService (or its pieces) is invalid
├── EngineConfigError     the simulated engine was given a bad config, profile or workload
├── MetricsError          a metrics source failed (unreachable, malformed, PromQL error)
├── ClusterError          the local control plane could not be built or started
└── (beside their code)   KubeApiError (operator), ReleaseError (vLLM wheel),
                          BenchError, PodRunnerError, LaunchError, DemoError
"""

from __future__ import annotations

__all__ = [
    "MAX_METRICS_ERROR_CHARS",
    "ClusterError",
    "EngineConfigError",
    "MetricsError",
    "SpecValidationError",
    "SpecopsError",
]


class SpecopsError(Exception):
    """Base of every error specops raises on purpose."""


class SpecValidationError(SpecopsError):
    """A SpeculativeService spec is invalid; the message names the field and the fix."""


class EngineConfigError(SpecopsError):
    """The simulated engine was given an invalid speculative config, profile or workload."""


# A metrics error's text reaches status and the logs; what a source answered is the
# source's to choose, so it is cut to this many characters.
MAX_METRICS_ERROR_CHARS = 512


class MetricsError(SpecopsError):
    """A metrics source could not produce a sample (unreachable, malformed page, PromQL error).

    The message is cut to :data:`MAX_METRICS_ERROR_CHARS`: it may quote the answer.
    """

    def __init__(self, message: str) -> None:
        if len(message) > MAX_METRICS_ERROR_CHARS:
            cut = len(message) - MAX_METRICS_ERROR_CHARS
            message = f"{message[:MAX_METRICS_ERROR_CHARS]}... ({cut} more characters)"
        super().__init__(message)


class ClusterError(SpecopsError):
    """The local control plane could not be built, started or reached."""
