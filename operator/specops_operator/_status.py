"""Status of a SpeculativeService, derived from what was observed: pure, clock injected."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from specops.api import SpeculativeConfigStatus, SpeculativeService
from specops.render import Plan, speculative_config_status

__all__ = ["degraded_conditions", "desired_status", "rollout_complete"]

Obj = dict[str, Any]


def _condition(type_: str, status: str, reason: str, message: str) -> Obj:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def rollout_complete(deployment: Mapping[str, Any], want: int) -> bool:
    """Whether a Deployment's rollout is complete, as ``kubectl rollout status`` has it: its
    controller has seen the latest generation, and all ``want`` pods run the new template
    and are Ready, with no old pod left."""
    status = deployment.get("status", {})
    observed = status.get("observedGeneration", 0)
    generation = deployment.get("metadata", {}).get("generation", observed)
    return bool(
        observed >= generation
        and status.get("updatedReplicas", 0) >= want
        and status.get("readyReplicas", 0) >= want
        and status.get("replicas", 0) == want
    )


def _deployment_conditions(deployment: Mapping[str, Any] | None, want: int) -> list[Obj]:
    """Ready, Progressing and Degraded from the live Deployment's status."""
    if deployment is None:
        return [
            _condition("Ready", "False", "DeploymentMissing", "the Deployment does not exist yet"),
            _condition("Progressing", "True", "Creating", "creating the Deployment"),
            _condition("Degraded", "False", "AsExpected", ""),
        ]
    status = deployment.get("status", {})
    ready = status.get("readyReplicas", 0)
    updated = status.get("updatedReplicas", 0)
    failed = [
        c
        for c in status.get("conditions", [])
        if (c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded")
        or (c.get("type") == "ReplicaFailure" and c.get("status") == "True")
    ]
    rolled_out = rollout_complete(deployment, want)
    progress = f"{updated}/{want} pods updated, {ready} ready"
    conditions = [
        _condition("Ready", "True", "AllReplicasReady", f"{ready}/{want} pods ready")
        if rolled_out
        else _condition("Ready", "False", "ReplicasNotReady", f"{ready}/{want} pods ready"),
        _condition("Progressing", "False", "RolloutComplete", progress)
        if rolled_out
        else _condition("Progressing", "True", "RollingOut", progress),
    ]
    if failed:
        reason = failed[0].get("reason") or "DeploymentFailed"
        conditions.append(_condition("Degraded", "True", reason, failed[0].get("message", "")))
    else:
        conditions.append(_condition("Degraded", "False", "AsExpected", ""))
    return conditions


def _speculation_condition(config: SpeculativeConfigStatus) -> Obj:
    if config.enabled:
        return _condition("SpeculationActive", "True", "Speculating", config.json_ or "")
    return _condition("SpeculationActive", "False", "SpeculationOff", "no --speculative-config")


def _stamped(
    new: list[Obj], old: Sequence[Mapping[str, Any]], now: str, generation: int | None
) -> list[Obj]:
    """Keep lastTransitionTime when a condition's status did not change."""
    previous = {c.get("type"): c for c in old}
    stamped = []
    for condition in new:
        before = previous.get(condition["type"])
        unchanged = before is not None and before.get("status") == condition["status"]
        since = before.get("lastTransitionTime", now) if before is not None and unchanged else now
        stamped.append({**condition, "lastTransitionTime": since})
        if generation is not None:
            stamped[-1]["observedGeneration"] = generation
    return stamped


def desired_status(
    service: SpeculativeService,
    plan: Plan,
    deployment: Mapping[str, Any] | None,
    now: datetime,
    foreign: Sequence[str] = (),
) -> Obj:
    """The status fields the reconciler owns (see :mod:`specops_operator._owners`), whole.

    ``foreign`` names the children whose names objects the service does not own have taken.
    """
    old = service.status
    old_conditions = (
        [c.model_dump(by_alias=True, exclude_none=True) for c in old.conditions] if old else []
    )
    # What the pods are rendered with, rebuilt from the spec: never status's own text.
    config = speculative_config_status(plan.spec, plan.speculation, plan.source)
    # With a canary, one of the replicas runs in the canary's own Deployment.
    replicas = plan.spec.replicas - (1 if plan.canary is not None else 0)
    conditions = _deployment_conditions(deployment, replicas)
    if foreign:  # a child the service cannot have degrades it, whatever the Deployment says
        conditions = [c for c in conditions if c["type"] != "Degraded"]
        conditions.append(_condition("Degraded", "True", "NameTaken", "; ".join(foreign)))
    conditions.append(_speculation_condition(config))
    generation = service.metadata.generation
    live = (deployment or {}).get("status", {})
    selector = ",".join(f"{k}={v}" for k, v in plan.selector.items())
    status = {
        "observedGeneration": generation,
        "replicas": live.get("replicas", 0),
        "readyReplicas": live.get("readyReplicas", 0),
        "selector": selector,
        "conditions": _stamped(conditions, old_conditions, now.isoformat(), generation),
        "speculativeConfig": config.model_dump(by_alias=True, exclude_none=True, mode="json"),
    }
    return {key: value for key, value in status.items() if value is not None}


def degraded_conditions(
    current: Sequence[Mapping[str, Any]], reason: str, message: str, now: datetime
) -> list[Obj] | None:
    """The reconciler's conditions with Degraded set True for ``reason``; None when they
    already say so.

    A reconciliation that cannot be built (a spec only the operator can find wrong, a child
    the API server refuses) is reported once on the object, not retried in silence; the next
    successful reconciliation derives Degraded from the Deployment again.
    """
    text = message[:1024]
    for condition in current:
        if condition.get("type") == "Degraded" and (
            condition.get("status"),
            condition.get("reason"),
            condition.get("message"),
        ) == ("True", reason, text):
            return None
    kept = [dict(c) for c in current if c.get("type") != "Degraded"]
    degraded = _condition("Degraded", "True", reason, text)
    return [*kept, {**degraded, "lastTransitionTime": now.isoformat()}]
