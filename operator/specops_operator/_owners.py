"""Which writer owns which status field: the one table, and what follows from it (pure).

Two writers report on a SpeculativeService: the reconciler (the kopf handlers: what was
rendered and how the rollout goes) and the control loop (what was measured and decided).
Each writes the status subresource by server-side apply under its own field manager and
sends every field it owns, and only those: the API server merges the two (conditions are a
list keyed by ``type``), and removes a field its writer stops sending. Neither copies the
other's entries, so neither can drop or bring back what the other wrote.

Operators before these managers merge-patched status as :data:`FIELD_MANAGER`; what that
manager holds is handed to the writers by the same table (:func:`handed_over`), so that a
field none of them sends any more is removed rather than left behind.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from specops_operator._kube import FIELD_MANAGER

__all__ = [
    "CONDITION_OWNERS",
    "FIELD_OWNERS",
    "Writer",
    "handed_over",
    "owned_status",
    "status_apply",
]

Obj = dict[str, Any]


class Writer(StrEnum):
    """A writer of status, named as its field manager."""

    RECONCILER = "specops-reconciler"
    CONTROLLER = "specops-controller"


# Every status field but the conditions, by its writer.
FIELD_OWNERS: Mapping[str, Writer] = {
    "observedGeneration": Writer.RECONCILER,
    "replicas": Writer.RECONCILER,
    "readyReplicas": Writer.RECONCILER,
    "selector": Writer.RECONCILER,
    # What the pods are rendered with; the control loop's choice reaches it through a
    # reconciliation (see reconcile's ``choice``), so the render and its record never part.
    "speculativeConfig": Writer.RECONCILER,
    "lastMeasurements": Writer.CONTROLLER,
    "lastDecision": Writer.CONTROLLER,
    "controller": Writer.CONTROLLER,
}
# Every condition type, by its writer.
CONDITION_OWNERS: Mapping[str, Writer] = {
    "Ready": Writer.RECONCILER,
    "Progressing": Writer.RECONCILER,
    "Degraded": Writer.RECONCILER,
    "SpeculationActive": Writer.RECONCILER,
    "MetricsAvailable": Writer.CONTROLLER,
}


def owned_status(status: Mapping[str, Any], writer: Writer) -> Obj:
    """The part of ``status`` that ``writer`` owns (its fields, its conditions)."""
    owned = {k: v for k, v in status.items() if FIELD_OWNERS.get(k) is writer}
    conditions = [
        c for c in status.get("conditions") or [] if CONDITION_OWNERS.get(c.get("type")) is writer
    ]
    return {**owned, "conditions": conditions} if conditions else owned


def _present(value: Any) -> Any:
    """``value`` without null entries: an apply removes a field by leaving it out."""
    if isinstance(value, Mapping):
        return {k: _present(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_present(v) for v in value]
    return value


def status_apply(writer: Writer, status: Mapping[str, Any]) -> Obj:
    """The status ``writer`` applies: all it owns, nulls left out. Sending a field of the
    other writer would take it over, so that is a programming error."""
    foreign = owned_status(status, _other(writer))
    if foreign:
        raise ValueError(f"{writer} would write status fields it does not own: {sorted(foreign)}")
    return dict(_present(status))


def _other(writer: Writer) -> Writer:
    return Writer.CONTROLLER if writer is Writer.RECONCILER else Writer.RECONCILER


def _fields_of(tree: Mapping[str, Any], writer: Writer) -> Obj:
    """The part of a ``fieldsV1`` tree of status that ``writer`` owns by the table."""
    status = tree.get("f:status") or {}
    mine: Obj = {k: v for k, v in status.items() if FIELD_OWNERS.get(k[2:]) is writer}
    items = {
        key: value
        for key, value in (status.get("f:conditions") or {}).items()
        if key.startswith("k:") and CONDITION_OWNERS.get(json.loads(key[2:]).get("type")) is writer
    }
    if items:
        mine["f:conditions"] = {".": {}, **items}
    return {"f:status": {".": {}, **mine}} if mine else {}


def _union(a: Mapping[str, Any], b: Mapping[str, Any]) -> Obj:
    """Two ``fieldsV1`` trees as one."""
    return {k: _union(a.get(k) or {}, b.get(k) or {}) for k in {**a, **b}}


def handed_over(managed: Sequence[Mapping[str, Any]], version: str) -> list[Obj] | None:
    """``metadata.managedFields`` with the status that :data:`FIELD_MANAGER` holds handed to
    the writers the table names (joined to what each already holds); None when it holds
    none. ``version`` is the object's API version, for the writers' new entries."""
    old = [
        m for m in managed if m.get("manager") == FIELD_MANAGER and m.get("subresource") == "status"
    ]
    if not old:
        return None
    held: Obj = {}
    for each in old:
        held = _union(held, each.get("fieldsV1") or {})
    kept: list[Obj] = [dict(m) for m in managed if all(m is not o for o in old)]
    for writer in Writer:
        fields = _fields_of(held, writer)
        if not fields:
            continue
        entry: Obj | None = next(
            (m for m in kept if m.get("manager") == writer and m.get("subresource") == "status"),
            None,
        )
        if entry is None:
            entry = {
                "manager": str(writer),
                "operation": "Apply",
                "apiVersion": version,
                "fieldsType": "FieldsV1",
                "subresource": "status",
            }
            kept.append(entry)
        entry["fieldsV1"] = _union(entry.get("fieldsV1") or {}, fields)
    return kept
