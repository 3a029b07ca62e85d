"""The operator's own Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "CHILD_WRITES",
    "CROSSOVER_BATCH_SIZE",
    "DECISIONS",
    "MODE",
    "PREDICTED_GAIN",
    "RECONCILES",
    "RECONCILE_SECONDS",
    "RECONFIGURATIONS",
    "ROLLBACKS",
    "SPECULATIVE_TOKENS",
    "forget_service",
    "start_service",
]

_SERVICE = ["namespace", "service"]

RECONCILES = Counter(
    "specops_operator_reconciles",
    "Reconciliations of SpeculativeServices, by result (ok, error).",
    ["result"],
)
CHILD_WRITES = Counter(
    "specops_operator_child_writes",
    "Writes of owned objects, by kind and action (created, updated, reverted).",
    ["kind", "action"],
)
RECONCILE_SECONDS = Histogram(
    "specops_operator_reconcile_duration_seconds",
    "Time to reconcile one SpeculativeService.",
)

# The control loop (labels namespace and service name the SpeculativeService).
DECISIONS = Counter(
    "specops_decisions",
    "Decisions of the control loop, taken or withheld, by action and reason code.",
    [*_SERVICE, "action", "reason"],
)
MODE = Gauge(
    "specops_mode",
    "Speculation mode of each SpeculativeService: 1 for the active mode, 0 for the others.",
    [*_SERVICE, "mode"],
)
SPECULATIVE_TOKENS = Gauge(
    "specops_speculative_tokens",
    "num_speculative_tokens in force (the cap, with a per-batch-size table); 0 is off.",
    _SERVICE,
)
PREDICTED_GAIN = Gauge(
    "specops_predicted_gain_ratio",
    "Predicted gain of the recommended config over the one in force, as a fraction.",
    _SERVICE,
)
CROSSOVER_BATCH_SIZE = Gauge(
    "specops_crossover_batch_size",
    "Smallest batch size at which k draft tokens stop paying (absent: never, up to the limit).",
    [*_SERVICE, "k"],
)
RECONFIGURATIONS = Counter(
    "specops_reconfigurations",
    "Speculative configs applied by the control loop (each restarts the pods).",
    _SERVICE,
)
ROLLBACKS = Counter(
    "specops_rollbacks",
    "Rollouts rolled back to the last good config because new pods did not become Ready.",
    _SERVICE,
)


def start_service(namespace: str, name: str) -> None:
    """Export a new service's event counters at 0 before its first event, so that
    ``increase()`` (the alert rules) sees that first reconfiguration or rollback too."""
    for counter in (RECONFIGURATIONS, ROLLBACKS):
        counter.labels(namespace, name)


def forget_service(namespace: str, name: str) -> None:
    """Drop every series of one SpeculativeService, so a deleted one leaves no stale gauges."""
    labels = {"namespace": namespace, "service": name}
    for metric in (
        DECISIONS,
        MODE,
        SPECULATIVE_TOKENS,
        PREDICTED_GAIN,
        CROSSOVER_BATCH_SIZE,
        RECONFIGURATIONS,
        ROLLBACKS,
    ):
        metric.remove_by_labels(labels)
