"""The PodObservation: what one pod (or a whole service) measured, as typed JSON.

Served by the sidecar on ``/v1/observation`` and read by the operator. Every estimate
carries a status: ``ok`` (fresh data), ``stale`` (the values are real measurements but
the source has not answered for a while) or ``unknown`` (nothing to measure from; all
values null). ``reason`` says why an estimate is not ``ok``. Times are Unix seconds;
durations and latencies are seconds; KV-cache usage is a fraction in [0, 1].
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AcceptanceObservation",
    "CandidateK",
    "CostObservation",
    "CostPointObservation",
    "DistributionObservation",
    "EstimateStatus",
    "ExpectedTokensObservation",
    "LatencyObservation",
    "LoadObservation",
    "OutcomeObservation",
    "PodObservation",
    "PredictionObservation",
    "SourceObservation",
    "StepTimeFitObservation",
    "WindowObservation",
]


class EstimateStatus(StrEnum):
    OK = "ok"
    STALE = "stale"
    UNKNOWN = "unknown"
    INVALID = "invalid"
    """The readings hold values no engine reports; they are left out (see ``problems``)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Estimate(_Model):
    status: EstimateStatus
    reason: str = Field("", description="Why the estimate is stale or unknown; empty when ok.")


class ExpectedTokensObservation(_Model):
    k: int = Field(ge=0)
    tokens: float = Field(description="E(k): tokens emitted per step, bonus token included.")
    stderr: float = Field(ge=0, description="Standard error of E(k); shrinks with drafts seen.")
    measured: bool = Field(description="False where E(k) extrapolates past the configured k.")


class AcceptanceObservation(_Estimate):
    drafts: float = Field(0.0, description="Drafts in the window (one per request per step).")
    mean_acceptance_length: float | None = Field(None, description="1 + accepted / drafts.")
    acceptance_rate: float | None = Field(
        None, description="accepted / draft tokens, vLLM's 'acceptance rate' (not alpha)."
    )
    per_position: list[float] = Field(
        default_factory=list,
        description="a_i: fraction of drafts whose i-th token was accepted, over the drafts "
        "that proposed a token there (a per-batch-size table's short drafts corrected for); "
        "positions no draft reached are left out.",
    )
    accepted_per_position: list[float] = Field(
        default_factory=list,
        description="Accepted tokens at each draft position over the window: the engine's "
        "counter, uncorrected (empty from sidecars older than this field).",
    )
    expected_tokens: list[ExpectedTokensObservation] = Field(default_factory=list)


class DistributionObservation(_Model):
    samples: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float
    bounds: list[float] = Field(description="Finite bucket upper bounds.")
    cumulative_fractions: list[float] = Field(
        description="Fraction of samples at or below each bound."
    )


class LoadObservation(_Estimate):
    engines: int = Field(1, description="Engines sharing the counters (pods x data-parallel).")
    running: DistributionObservation | None = Field(
        None, description="Running requests per engine, sampled once per reading."
    )
    waiting: DistributionObservation | None = Field(
        None, description="Waiting requests per engine."
    )
    kv_cache_usage: DistributionObservation | None = Field(
        None, description="KV-cache usage fraction, averaged over engines."
    )
    kv_capacity_tokens: float | None = Field(
        None,
        description="KV-cache tokens per engine, the pool the usage is a share of, as the "
        "engine reports it (vllm:cache_config_info num_gpu_blocks x block_size); null when "
        "it does not.",
    )
    preemptions: float | None = None
    preemptions_per_second: float | None = None


class CostPointObservation(_Model):
    batched_tokens: float
    step_seconds: float
    steps: float
    batch: float = 0.0
    drafted_tokens: float = 0.0
    drafts: float = 0.0
    decoding: float = 0.0
    end: float = 0.0
    spread: list[tuple[float, float]] = Field(
        default_factory=list,
        description="Batched tokens per step and the share of steps there, by histogram bucket.",
    )


class StepTimeFitObservation(_Model):
    intercept_seconds: float
    slope_seconds_per_token: float
    intercept_stddev_seconds: float
    slope_stddev_seconds_per_token: float
    correlation: float
    points: int
    steps: float


class CostObservation(_Estimate):
    steps_per_second: float | None = Field(None, description="Per engine.")
    batched_tokens_per_step: float | None = Field(
        None, description="Verified tokens per step (emitted + draft - accepted)."
    )
    step_seconds: float | None = None
    points: list[CostPointObservation] = Field(default_factory=list)
    prior: StepTimeFitObservation | None = Field(
        None, description="The profile's step time at the configured k, T = a + b N."
    )
    fit: StepTimeFitObservation | None = Field(
        None, description="The posterior of T = a + b N: the prior moved by the window's points."
    )


class LatencyObservation(_Model):
    observations: float
    mean_seconds: float
    p50_seconds: float
    p90_seconds: float
    p99_seconds: float
    bounds: list[float] = Field(
        default_factory=list,
        description="Finite bucket upper bounds (empty from sidecars older than this field).",
    )
    cumulative_fractions: list[float] = Field(
        default_factory=list, description="Fraction of the observations at or below each bound."
    )


class OutcomeObservation(_Estimate):
    tpot: LatencyObservation | None = Field(None, description="Time per output token per request.")
    itl: LatencyObservation | None = Field(None, description="Inter-token latency.")
    output_tokens_per_second: float | None = None
    prompt_tokens_per_second: float | None = Field(
        None, description="Prompt tokens per second (vLLM's prompt_tokens counter)."
    )
    requests_per_second: float | None = None


class WindowObservation(_Model):
    window_seconds: float
    covered_seconds: float = Field(description="Time between the window's first and last reading.")
    readings: int
    resets: int = Field(description="Engine restarts seen in the window.")
    acceptance: AcceptanceObservation
    load: LoadObservation
    cost: CostObservation
    outcome: OutcomeObservation


class CandidateK(_Model):
    k: int = Field(ge=0)
    expected_tokens: float
    predicted_speedup: float = Field(
        description="Throughput with k over throughput without speculation, at the observed load."
    )
    predicted_tpot_seconds: float = Field(
        description="Mean TPOT with k over the observed batch-size distribution."
    )
    crossover_batch: int | None = Field(
        description="Smallest batch where TPOT(k) >= TPOT(0); null if k wins up to the limit."
    )


class PredictionObservation(_Estimate):
    window_seconds: float | None = None
    mean_batch: float | None = None
    candidates: list[CandidateK] = Field(default_factory=list)
    recommended_k: int | None = Field(None, description="num_speculative_tokens to run; 0 is off.")
    recommended_schedule: list[list[int]] = Field(
        default_factory=list, description="num_speculative_tokens_per_batch_size, if any."
    )
    explanation: str = ""


class SourceObservation(_Model):
    kind: Literal["direct", "prometheus"]
    target: str = Field(description="The engine's /metrics URL or the Prometheus query.")
    up: bool
    last_success: float | None = None
    error: str = ""


class PodObservation(_Model):
    """One pod's (or service's) windowed measurements and what they predict."""

    namespace: str
    pod: str | None = Field(
        description="The pod measured; null when the measurements are a whole service's."
    )
    service: str
    observed_at: float
    latest_reading_at: float | None
    status: EstimateStatus
    configured_k: int | None = Field(
        None, description="Draft positions the engine reports (its num_speculative_tokens)."
    )
    source: SourceObservation
    windows: list[WindowObservation]
    prediction: PredictionObservation
    problems: list[str] = Field(
        default_factory=list,
        description="Impossible readings in the longest window (status invalid), as messages.",
    )

    @property
    def subject(self) -> str:
        """What was measured, in a message: the pod, or the service when there is none."""
        return self.pod if self.pod is not None else self.service
