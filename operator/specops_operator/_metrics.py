"""The operator's own Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

__all__ = ["CHILD_WRITES", "RECONCILES", "RECONCILE_SECONDS"]

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
