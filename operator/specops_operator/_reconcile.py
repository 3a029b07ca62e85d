"""One level-based reconciliation: read the world, write only what differs, report.

The same function runs for every trigger (create, update, resume, timer, a change of an
owned Deployment, the control loop's new choice): it never knows which event fired. Triggers
fire together (creating the Deployment wakes the handler of owned Deployments while the
first reconciliation is still applying the Service), so reconciliations of one
SpeculativeService take turns: the later one reads what the earlier wrote, and each child is
created, and announced, once. Children are written by server-side
apply, so the fields the operator renders are exactly the spec's (a field it stops rendering
is removed) while fields other managers own (a restart annotation, an HPA) are left alone.
Status is applied the same way, under the reconciler's own field manager: only the fields
:mod:`specops_operator._owners` gives it, never the control loop's.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from specops.api import SpeculativeService, parse_service
from specops.render import HASH_ANNOTATION, Plan, RenderOptions, canary_name, plan
from specops_operator._kube import CONFLICT, Kube, KubeApiError, deployment_ref
from specops_operator._metrics import CHILD_WRITES
from specops_operator._owners import Writer, handed_over, owned_status, status_apply
from specops_operator._status import desired_status

__all__ = [
    "ChildWrite",
    "Outcome",
    "covers",
    "forget_turn",
    "planned",
    "reconcile",
]

Obj = dict[str, Any]
PODMONITOR_GROUP = "monitoring.coreos.com"
_TURNS: dict[tuple[str, str], threading.Lock] = {}
_TURNS_GUARD = threading.Lock()
# Applies refused because the child changed since it was read, before one goes ahead anyway.
_PRECONDITION_TRIES = 3


@dataclass(frozen=True)
class ChildWrite:
    """One write to an owned object, and why it was needed."""

    kind: str
    name: str
    action: str  # created, updated (new render), reverted (someone edited an owned field)


@dataclass(frozen=True)
class Outcome:
    """What a reconciliation wrote: child objects, and whether status changed."""

    writes: tuple[ChildWrite, ...]
    status_written: bool


def covers(desired: Any, live: Any) -> bool:
    """Whether ``live`` holds every field of ``desired`` (server-added fields are ignored)."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(
            key in live and covers(value, live[key]) for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(live) == len(desired)
            and all(covers(d, item) for d, item in zip(desired, live, strict=True))
        )
    return bool(desired == live)


def _hash(obj: Mapping[str, Any]) -> str | None:
    annotations = obj.get("metadata", {}).get("annotations") or {}
    value = annotations.get(HASH_ANNOTATION)
    return value if isinstance(value, str) else None


def _projection(shape: Any, obj: Any) -> Any:
    """The part of ``obj`` at the keys of ``shape``; a list is taken whole (with any entries
    other managers added), so that two projections differ only where an owned field does."""
    if isinstance(shape, Mapping) and isinstance(obj, Mapping):
        return {key: _projection(value, obj.get(key)) for key, value in shape.items()}
    return obj


def _owned_by(obj: Mapping[str, Any], uid: str | None) -> bool:
    """Whether ``obj`` names the SpeculativeService with ``uid`` as its controller."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return uid is not None and any(r.get("uid") == uid and r.get("controller") for r in refs)


def _foreign_child(live: Mapping[str, Any]) -> str:
    """The message for a child's name taken by an object that is not the service's."""
    meta = live.get("metadata", {})
    owners = [f"{r.get('kind')} {r.get('name')}" for r in meta.get("ownerReferences") or []]
    held = f"owned by {', '.join(owners)}" if owners else "not owned by this SpeculativeService"
    return (
        f"{live.get('kind')} {meta.get('namespace')}/{meta.get('name')} already exists, {held}; "
        "it is left as it is: rename or delete it and the operator creates its own"
    )


def _apply(kube: Kube, desired: Obj, live: Obj | None) -> tuple[str | None, Obj]:
    """Server-side apply one child unless it already matches; what changed, and the live object.

    An unchanged render that the live object covers costs no write (and no read when the
    watch cache holds the child). Otherwise the apply decides:
    it creates, updates to the new render, or takes back fields someone edited ("reverted").
    When the live object differs only by what other managers added (an entry in a list the
    operator renders, which ``covers`` counts as a difference), the apply changes none of the
    rendered fields and nothing is reported; what others wrote meanwhile (the Deployment
    controller's revision annotation, status) is not compared. ``live`` is the object as read.

    What the apply changed is known only against the version it changed, so an update names
    the version read as its precondition: an edit landing between the read and the apply
    makes the API server refuse it, and the object is read again from the API server (the
    cache may lag the edit). Without that, an edit the
    apply took back would go unreported. After :data:`_PRECONDITION_TRIES` refusals (an object
    rewritten faster than the round trip) the apply goes ahead against the last read.
    """
    if live is not None and _hash(live) == _hash(desired) and covers(desired, live):
        return None, live
    for _ in range(_PRECONDITION_TRIES):
        try:
            applied = kube.apply(_at_version(desired, live))
            break
        except KubeApiError as exc:
            if exc.status != CONFLICT:
                raise
            live = kube.get(desired, fresh=True)
    else:
        applied = kube.apply(desired)
    if live is None:
        return "created", applied
    if _hash(live) != _hash(desired):
        return "updated", applied
    changed = _projection(desired, applied) != _projection(desired, live)
    return ("reverted" if changed else None), applied


def _at_version(desired: Obj, live: Obj | None) -> Obj:
    """``desired`` with the version read as the apply's precondition (none for a creation)."""
    version = (live or {}).get("metadata", {}).get("resourceVersion")
    if version is None:
        return desired
    return {**desired, "metadata": {**desired["metadata"], "resourceVersion": version}}


def reconcile(
    kube: Kube,
    body: Mapping[str, Any],
    options: RenderOptions,
    post_event: Callable[[str, str, str], None],
    now: datetime | None = None,
    choice: Mapping[str, Any] | None = None,
) -> Outcome:
    """Bring the children of one SpeculativeService to their rendered state; apply its status.

    ``body`` only names the service: once its turn is taken the object is read again, so a
    reconciliation renders and reports what the one before it (or the control loop) wrote,
    not the copy its trigger carried. ``choice`` is a new ``status.speculativeConfig`` the
    control loop decided on: this reconciliation, the one writer of that field, records it
    before it renders (an operator restarted in between renders it too), and it is checked
    against the spec as any recorded choice is.
    """
    named: SpeculativeService = parse_service(body)
    namespace, name = named.metadata.namespace, named.metadata.name
    with _turn(namespace, name):
        fresh = kube.get_service(namespace, name)
        if fresh is None:  # deleted meanwhile: nothing to bring anywhere
            return Outcome((), False)
        fresh, handed = _hand_over(kube, fresh)
        if choice is not None:
            owned = owned_status(fresh.get("status") or {}, Writer.RECONCILER)
            recorded = status_apply(Writer.RECONCILER, {**owned, "speculativeConfig": choice})
            fresh = kube.apply_status(fresh, recorded, Writer.RECONCILER)
        return _reconcile(kube, parse_service(fresh), fresh, options, post_event, now, handed)


def _hand_over(kube: Kube, body: Obj) -> tuple[Obj, bool]:
    """The object once the status an older operator merge-patched is handed to the writers
    (see :func:`handed_over`), and whether it was just handed over. The API server refuses
    a handover computed from a stale copy (the watch cache's, with another writer's status
    newer): it is computed again from the object as the API server holds it; a second
    refusal fails the reconciliation, which is retried."""
    try:
        return _handed(kube, body)
    except KubeApiError as exc:
        if exc.status != CONFLICT:
            raise
    live = kube.get(body, fresh=True)
    return (body, False) if live is None else _handed(kube, live)


def _handed(kube: Kube, body: Obj) -> tuple[Obj, bool]:
    managed = handed_over(body["metadata"].get("managedFields") or [], body["apiVersion"])
    if managed is None:
        return body, False
    return kube.replace_managed_fields(body, managed), True


def planned(
    kube: Kube, service: SpeculativeService, options: RenderOptions
) -> tuple[Plan, Obj | None]:
    """The service's plan against the selector of its live Deployment, and that Deployment
    as read (None when there is none).

    A Deployment's selector cannot change, so one this service owns keeps selecting as it
    was made; a new one (or a name taken by a foreign object, which is never written)
    selects by the owner's uid too."""
    name, namespace = service.metadata.name, service.metadata.namespace
    live = kube.get(deployment_ref(namespace, name))
    owned = live if live is not None and _owned_by(live, service.metadata.uid) else {}
    selector = (owned.get("spec", {}).get("selector") or {}).get("matchLabels")
    return plan(service, options, selector), live


def _turn(namespace: str, name: str) -> threading.Lock:
    """The lock that one service's reconciliations take in turn (threads of kopf's executor)."""
    with _TURNS_GUARD:
        return _TURNS.setdefault((namespace, name), threading.Lock())


def forget_turn(namespace: str, name: str) -> None:
    """A deleted service needs no lock; one made again later starts free."""
    with _TURNS_GUARD:
        _TURNS.pop((namespace, name), None)


def _reconcile(
    kube: Kube,
    service: SpeculativeService,
    body: Mapping[str, Any],
    options: RenderOptions,
    post_event: Callable[[str, str, str], None],
    now: datetime | None,
    handed: bool,
) -> Outcome:
    """One reconciliation, run while holding the service's turn. ``handed``: status was just
    handed over from an older operator, so it is applied even if nothing else changed (what
    the reconciler no longer sends is removed then)."""
    pod_monitor = kube.has_api_group(PODMONITOR_GROUP)
    wanted, live_deployment = planned(kube, service, replace(options, pod_monitor=pod_monitor))
    if wanted.refused is not None:
        post_event("Warning", "StatusRefused", wanted.refused)
    children = copy.deepcopy(list(wanted.objects))
    kopf.adopt(children, owner=cast(kopf.Body, dict(body)))
    writes = []
    foreign: list[str] = []
    deployment: Obj | None = None
    for child in children:
        main = child["kind"] == "Deployment" and child["metadata"]["name"] == service.metadata.name
        found = live_deployment if main else kube.get(child)
        if found is not None and not _owned_by(found, service.metadata.uid):
            foreign.append(_foreign_child(found))  # never adopt or overwrite it
            continue
        action, live = _apply(kube, child, found)
        if action is not None:
            name = child["metadata"]["name"]
            writes.append(ChildWrite(child["kind"], name, action))
            CHILD_WRITES.labels(child["kind"], action).inc()
            post_event("Normal", action.capitalize(), f"{child['kind']} {name} {action}")
        if main:
            deployment = live
    writes += _retire_canary(kube, service, wanted, post_event)
    status = desired_status(service, wanted, deployment, now or datetime.now(UTC), foreign)
    if foreign and _newly_foreign(body, status):
        for message in foreign:
            post_event("Warning", "NameTaken", message)
    current = owned_status(body.get("status") or {}, Writer.RECONCILER)
    status_written = handed or not _same(status, current)
    if status_written:
        applied = status_apply(Writer.RECONCILER, status)
        kube.apply_status(dict(body), applied, Writer.RECONCILER)
    return Outcome(tuple(writes), status_written)


def _retire_canary(
    kube: Kube,
    service: SpeculativeService,
    wanted: Plan,
    post_event: Callable[[str, str, str], None],
) -> list[ChildWrite]:
    """Delete the canary's Deployment once no canary runs (only a service with two or more
    replicas can have had one). It is looked for in the watch cache only: it carries the
    operator's labels, so the watch delivers it, and a fleet pays no read per resync."""
    if wanted.canary is not None or wanted.spec.replicas < 2:
        return []
    name = canary_name(service.metadata.name)
    ref = deployment_ref(service.metadata.namespace, name)
    live = kube.held(ref)
    if live is None or not _owned_by(live, service.metadata.uid) or not kube.delete(ref):
        return []
    CHILD_WRITES.labels("Deployment", "deleted").inc()
    post_event("Normal", "Deleted", f"Deployment {name} deleted: the canary has ended")
    return [ChildWrite("Deployment", name, "deleted")]


def _newly_foreign(body: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether the NameTaken condition is new or names other objects: warn once per
    conflict, not at every resync."""

    def taken(conditions: Any) -> Any:
        found = [c for c in conditions or [] if c.get("reason") == "NameTaken"]
        return found[0].get("message") if found else None

    before = taken((body.get("status") or {}).get("conditions"))
    return bool(before != taken(status.get("conditions")))


def _same(desired: Mapping[str, Any], live: Mapping[str, Any]) -> bool:
    """Whether the live status holds exactly the fields and conditions of ``desired``
    (server-added keys inside a field are ignored, and so are transition times alone, which
    are no reason to write)."""
    want, have = _keyed(desired), _keyed(live)
    return (
        want.keys() == have.keys()
        and want["conditions"].keys() == have["conditions"].keys()
        and covers(want, have)
    )


def _keyed(status: Mapping[str, Any]) -> Obj:
    """Status with its conditions by type and without their transition times."""
    conditions = {
        c.get("type"): {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions") or []
    }
    return {**status, "conditions": conditions}
