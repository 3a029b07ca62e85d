"""What the demo shows at one moment: the load it drives, what the controller measured and
decided, and what the pods run; built from plain API objects, without any I/O.

The parts of ``status`` are read one by one, so a field the operator has not written yet
(or one this version does not know) leaves a blank instead of hiding the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from specops.api import DecisionStatus, Measurements, SpeculativeConfigStatus

__all__ = [
    "CrossoverView",
    "DecisionView",
    "LoadCounts",
    "Snapshot",
    "decision_view",
    "describe_config_status",
    "describe_vllm_config",
    "engine_config",
    "short_time",
    "take_snapshot",
]

_Model = TypeVar("_Model", bound=BaseModel)
Obj = Mapping[str, Any]


@dataclass(frozen=True)
class LoadCounts:
    """The load driver's own counts."""

    target: int
    in_flight: int
    completed: int
    failed: int


@dataclass(frozen=True)
class CrossoverView:
    """Where k drafts stop paying, as the decision measured it: the batch size under the
    step-time posterior's mean and its 10th-90th percentile band (None: beyond the cap)."""

    k: int
    batch: int | None
    low: int | None
    high: int | None


@dataclass(frozen=True)
class DecisionView:
    """The controller's last decision, as the table and the report show it.

    ``step_time`` is where its step-time model came from (``Prior``: the profile alone,
    ``Measured``: updated by the engines' steps), over ``step_time_intervals`` intervals.
    """

    time: str
    action: str
    reason_code: str | None
    reason: str
    applied: bool
    recommended: str | None
    predicted_gain_percent: float | None
    crossovers: tuple[CrossoverView, ...] = ()
    step_time: str | None = None
    step_time_intervals: int = 0

    def crossover(self, k: int) -> CrossoverView | None:
        return next((c for c in self.crossovers if c.k == k), None)

    @property
    def last_crossover(self) -> CrossoverView | None:
        """The crossover above which no k pays (the largest), if every k has one."""
        if not self.crossovers or any(c.batch is None for c in self.crossovers):
            return None
        return max(self.crossovers, key=lambda c: c.batch or 0)


@dataclass(frozen=True)
class Snapshot:
    elapsed_s: float
    duration_s: float
    phase: str
    load: LoadCounts
    engine_in_flight: float | None
    concurrency: float | None
    acceptance_length: float | None
    tpot_ms: float | None
    in_force: str
    deployment: str
    decision: DecisionView | None
    ready: int
    desired: int
    engines: tuple[str, ...]


def short_time(stamp: str) -> str:
    """``14:46:19`` of an RFC 3339 time stamp (``2026-12-01T14:46:19.68+00:00``); anything
    else as it is."""
    if "T" not in stamp:
        return stamp
    return stamp.split("T", 1)[1][:8]


def _part(model: type[_Model], data: object) -> _Model | None:
    if not isinstance(data, Mapping):
        return None
    try:
        return model.model_validate(data)
    except ValidationError:
        return None


def _ranges(table: Sequence[Sequence[int]]) -> str:
    return " ".join(f"{lo}-{hi}:{k}" for lo, hi, k in table)


def describe_config_status(config: SpeculativeConfigStatus | None) -> str:
    """``off``, ``k=3`` or ``k<=5 [1-63:5 64-127:3]`` for a status speculativeConfig."""
    if config is None:
        return "?"
    if not config.enabled or config.num_speculative_tokens == 0:
        return "off"
    if config.schedule:
        rows = [
            (r.min_batch_size, r.max_batch_size, r.num_speculative_tokens) for r in config.schedule
        ]
        return f"k<={config.num_speculative_tokens} [{_ranges(rows)}]"
    return f"k={config.num_speculative_tokens}"


def describe_vllm_config(text: str | None) -> str:
    """The same words for a ``--speculative-config`` JSON (``None``: no flag, so off)."""
    if text is None:
        return "off"
    try:
        config = json.loads(text)
        k = int(config["num_speculative_tokens"])
    except (ValueError, KeyError, TypeError):
        return "?"
    table = config.get("num_speculative_tokens_per_batch_size")
    return f"k<={k} [{_ranges(table)}]" if table else f"k={k}"


def engine_config(deployment: Obj | None) -> str | None:
    """The ``--speculative-config`` of the Deployment's vLLM container (None: none given)."""
    if deployment is None:
        return None
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers")
    for container in containers or ():
        if container.get("name") == "vllm":
            args = list(container.get("args") or ())
            if "--speculative-config" in args[:-1]:
                return str(args[args.index("--speculative-config") + 1])
    return None


def decision_view(decision: DecisionStatus | None) -> DecisionView | None:
    if decision is None:
        return None
    return DecisionView(
        time=decision.time,
        action=decision.action,
        reason_code=decision.reason_code,
        reason=decision.reason,
        applied=decision.applied,
        recommended=describe_config_status(decision.recommended)
        if decision.recommended is not None
        else None,
        predicted_gain_percent=decision.predicted_gain_percent,
        crossovers=tuple(
            CrossoverView(c.k, c.batch_size, c.batch_size_low, c.batch_size_high)
            for c in decision.crossovers
        ),
        step_time=decision.step_time_model.source if decision.step_time_model else None,
        step_time_intervals=decision.step_time_model.intervals if decision.step_time_model else 0,
    )


def take_snapshot(
    *,
    elapsed_s: float,
    duration_s: float,
    phase: str,
    load: LoadCounts,
    engine_in_flight: float | None = None,
    service: Obj | None,
    deployment: Obj | None,
    engines: Sequence[str | None],
) -> Snapshot:
    """One moment of the demo from the SpeculativeService, its Deployment, the running
    engines' ``--speculative-config`` values (None: an engine without speculation), and
    the requests the engines hold by their own gauges (``engine_in_flight``)."""
    status: Obj = (service or {}).get("status") or {}
    measured = _part(Measurements, status.get("lastMeasurements"))
    deployment_status: Obj = (deployment or {}).get("status") or {}
    return Snapshot(
        elapsed_s=elapsed_s,
        duration_s=duration_s,
        phase=phase,
        load=load,
        engine_in_flight=engine_in_flight,
        concurrency=measured.concurrency if measured else None,
        acceptance_length=measured.acceptance_length if measured else None,
        tpot_ms=measured.tpot_seconds * 1e3
        if measured and measured.tpot_seconds is not None
        else None,
        in_force=describe_config_status(
            _part(SpeculativeConfigStatus, status.get("speculativeConfig"))
        ),
        deployment=describe_vllm_config(engine_config(deployment)) if deployment else "?",
        decision=decision_view(_part(DecisionStatus, status.get("lastDecision"))),
        ready=int(deployment_status.get("readyReplicas") or 0),
        desired=int((deployment or {}).get("spec", {}).get("replicas") or 0),
        engines=tuple(sorted(describe_vllm_config(e) for e in engines)),
    )
