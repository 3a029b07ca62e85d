"""The operator's own Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "CHILD_WRITES",
    "CROSSOVER_BAND",
    "CROSSOVER_BATCH_SIZE",
    "DECISIONS",
    "MODE",
    "PREDICTED_GAIN",
    "PRIOR_CROSSOVER",
    "RECONCILES",
    "RECONCILE_SECONDS",
    "RECONFIGURATIONS",
    "ROLLBACKS",
    "SHARDS_HELD",
    "SHARD_MOVES",
    "SPECULATIVE_TOKENS",
    "STEP_TIME_INTERVALS",
    "TPOT_SPREAD",
    "forget_service",
    "start_service",
]

_SERVICE = ["namespace", "service"]

RECONCILES = Counter(
    "specops_operator_reconciles",
    "Reconciliations of SpeculativeServices, by result (ok, error).",
    ["result"],
)
SHARDS_HELD = Gauge(
    "specops_operator_shards_held",
    "Shards of SpeculativeServices this replica acts on (sharded mode; 0 otherwise).",
)
SHARD_MOVES = Counter(
    "specops_operator_shard_moves",
    "Shards this replica started or stopped acting on, by direction (gained, lost, released).",
    ["direction"],
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
CROSSOVER_BAND = Gauge(
    "specops_crossover_batch_size_band",
    "The crossover under the measured step-time posterior: its 10th and 90th percentiles "
    "(quantile label; absent: beyond the batch limit).",
    [*_SERVICE, "k", "quantile"],
)
PRIOR_CROSSOVER = Gauge(
    "specops_prior_crossover_batch_size",
    "The crossover the performance profile alone predicts, beside the measured one "
    "(absent: never, up to the limit).",
    [*_SERVICE, "k"],
)
STEP_TIME_INTERVALS = Gauge(
    "specops_step_time_measured_intervals",
    "Measured intervals the step-time model has learned from; 0: it is the profile's prior.",
    _SERVICE,
)
TPOT_SPREAD = Gauge(
    "specops_tpot_log_spread",
    "How far one request's TPOT strays from a config's mean, as the log-normal's standard "
    "deviation's two terms (term label: base, without speculation; heterogeneity, of the "
    "requests' acceptance, which k multiplies), measured from the window's request TPOT "
    "histogram or the prior where it measured none (source label).",
    [*_SERVICE, "term", "source"],
)
CANARY_GAIN = Gauge(
    "specops_canary_gain_ratio",
    "The latest canary's gain over the rest of the fleet, as a fraction: measured (its mean "
    "and the low and high ends of its interval) and predicted when it started (quantity label).",
    [*_SERVICE, "quantity"],
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
        CROSSOVER_BAND,
        PRIOR_CROSSOVER,
        STEP_TIME_INTERVALS,
        TPOT_SPREAD,
        CANARY_GAIN,
        RECONFIGURATIONS,
        ROLLBACKS,
    ):
        metric.remove_by_labels(labels)
