"""What a vLLM pod measured: windowed acceptance, load, step cost and outcome estimates.

The sidecar builds a :class:`PodObservation` from its own readings; the operator can build
the same from Prometheus for a whole service. Both poll a metrics source (the engine's
``/metrics`` or Prometheus, each reading through the HTTP GET its caller passes) with one
:class:`WindowedObserver`, and both go through the same pure path: readings -> snapshots
-> intervals -> window estimates.
"""

from specops.observation._acceptance import AcceptanceEstimate, ExpectedTokens, estimate_acceptance
from specops.observation._cost import (
    CostPoint,
    StepTimeFit,
    StepTimePrior,
    adjusted_cost_model,
    cost_point,
    fit_step_time,
    prior_from_model,
)
from specops.observation._history import History
from specops.observation._load import RUNNING_BOUNDS, Distribution, distribution, quantile
from specops.observation._model import (
    AcceptanceObservation,
    CandidateK,
    CostObservation,
    CostPointObservation,
    DistributionObservation,
    EstimateStatus,
    ExpectedTokensObservation,
    LatencyObservation,
    LoadObservation,
    OutcomeObservation,
    PodObservation,
    PredictionObservation,
    SourceObservation,
    StepTimeFitObservation,
    WindowObservation,
)
from specops.observation._names import Counter, Gauge, Hist
from specops.observation._observe import (
    ObserverConfig,
    distribution_observation,
    measured_prompts,
    observe,
)
from specops.observation._observer import OncePerCause, SourceCounts, WindowedObserver
from specops.observation._outcome import LatencyQuantiles, histogram_quantile, latency_quantiles
from specops.observation._series import (
    Reading,
    Series,
    label_matchers,
    parse_exposition,
    parse_prometheus_matrix,
    prometheus_selector,
)
from specops.observation._snapshot import (
    Histogram,
    Interval,
    Snapshot,
    interval_between,
    intervals_of,
    snapshot_from_reading,
)
from specops.observation._sources import (
    MAX_ANSWER_BYTES,
    EngineMetricsSource,
    HttpGet,
    MetricsSource,
    PrometheusSource,
    too_large,
)

__all__ = [
    "MAX_ANSWER_BYTES",
    "RUNNING_BOUNDS",
    "AcceptanceEstimate",
    "AcceptanceObservation",
    "CandidateK",
    "CostObservation",
    "CostPoint",
    "CostPointObservation",
    "Counter",
    "Distribution",
    "DistributionObservation",
    "EngineMetricsSource",
    "EstimateStatus",
    "ExpectedTokens",
    "ExpectedTokensObservation",
    "Gauge",
    "Hist",
    "Histogram",
    "History",
    "HttpGet",
    "Interval",
    "LatencyObservation",
    "LatencyQuantiles",
    "LoadObservation",
    "MetricsSource",
    "ObserverConfig",
    "OncePerCause",
    "OutcomeObservation",
    "PodObservation",
    "PredictionObservation",
    "PrometheusSource",
    "Reading",
    "Series",
    "Snapshot",
    "SourceCounts",
    "SourceObservation",
    "StepTimeFit",
    "StepTimeFitObservation",
    "StepTimePrior",
    "WindowObservation",
    "WindowedObserver",
    "adjusted_cost_model",
    "cost_point",
    "distribution",
    "distribution_observation",
    "estimate_acceptance",
    "fit_step_time",
    "histogram_quantile",
    "interval_between",
    "intervals_of",
    "label_matchers",
    "latency_quantiles",
    "measured_prompts",
    "observe",
    "parse_exposition",
    "parse_prometheus_matrix",
    "prior_from_model",
    "prometheus_selector",
    "quantile",
    "snapshot_from_reading",
    "too_large",
]
