"""One writer per status field: the table, and the two writers interleaved on one object.

The reconciler and the control loop write status by server-side apply, each under its own
field manager; the store here applies as the API server does
(:func:`~tests.operator.kmock_env.server_side_apply`), so what one writer sends can neither
drop nor bring back what the other wrote, and a field its writer stops sending goes.
"""

from __future__ import annotations

import copy
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from specops_operator import Kube, reconcile
from specops_operator._control import plan_tick
from specops_operator._fetch import Fetched
from specops_operator._owners import (
    CONDITION_OWNERS,
    FIELD_OWNERS,
    Writer,
    handed_over,
    owned_status,
    status_apply,
)

from specops.api import ConditionType, SpeculativeServiceStatus, parse_service
from specops.policy import SpecConfig
from specops.render import (
    RenderOptions,
    apply_defaults,
    speculation_in_force,
    speculative_config_status,
)
from tests.operator.kmock_env import server_side_apply

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama.yaml"
VERSION = "specops.io/v1alpha1"
Obj = dict[str, Any]


def _condition(type_: str, status: str, reason: str) -> Obj:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00+00:00",
    }


class _Store:
    """A SpeculativeService and its children, written as the API server would; ``on_get``
    runs when the reconciler reads a child, so another writer can land mid-reconciliation."""

    def __init__(self, service: Obj) -> None:
        self.service = service
        self.children: dict[tuple[str, str], Obj] = {}
        self.on_get: Callable[[], None] = lambda: None
        self.writes: list[str] = []  # each write: a child's kind, or "status"

    def get_service(self, namespace: str, name: str) -> Obj:
        return copy.deepcopy(self.service)

    def get(self, obj: Obj, *, fresh: bool = False) -> Obj | None:
        self.on_get()
        return copy.deepcopy(self.children.get((obj["kind"], obj["metadata"]["name"])))

    def held(self, obj: Obj) -> Obj | None:
        return self.get(obj)

    def apply(self, obj: Obj) -> Obj:
        self.writes.append(obj["kind"])
        self.children[(obj["kind"], obj["metadata"]["name"])] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def has_api_group(self, group: str) -> bool:
        return False

    def apply_status(self, service: Obj, status: Obj, manager: str) -> Obj:
        self.writes.append("status")
        self.service = server_side_apply(self.service, status, manager, VERSION)
        return copy.deepcopy(self.service)

    def replace_managed_fields(self, obj: Obj, managed: list[Obj]) -> Obj:
        self.service["metadata"]["managedFields"] = copy.deepcopy(managed)
        return copy.deepcopy(self.service)


def _example() -> Obj:
    body: Obj = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update(namespace="ml", uid="uid-llama-1", generation=2)
    return body


def _conditions(store: _Store) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in store.service["status"]["conditions"]}


def _reconcile(store: _Store) -> None:
    reconcile(cast(Kube, store), store.service, RenderOptions(), lambda *_: None)


def _controller_status(body: Obj) -> Obj:
    """What the control loop applies after a tick without measurements, planned on ``body``."""
    service = parse_service(body)
    assert service.status is not None
    spec = apply_defaults(service.spec)
    in_force = speculation_in_force(spec, service.status.speculative_config)
    blind = Fetched((), ("llama-0: cannot reach it",))
    tick = plan_tick(body, service.status, in_force, spec, blind, True, 1.7e9, 1024.0)
    return status_apply(Writer.CONTROLLER, tick.status)


def test_every_status_field_and_condition_type_has_one_writer() -> None:
    fields = {
        info.alias or name for name, info in SpeculativeServiceStatus.model_fields.items()
    } - {"conditions"}
    assert set(FIELD_OWNERS) == fields
    assert set(CONDITION_OWNERS) == set(typing.get_args(ConditionType))


def test_a_writer_sends_what_it_owns_without_nulls_and_nothing_of_the_other() -> None:
    metrics = _condition("MetricsAvailable", "True", "Measured")
    sent = status_apply(Writer.CONTROLLER, {"lastDecision": {"time": "t", "gainSeconds": None}})
    assert sent == {"lastDecision": {"time": "t"}}  # left out, and so removed
    with pytest.raises(ValueError, match="speculativeConfig"):
        status_apply(Writer.CONTROLLER, {"speculativeConfig": {"enabled": False}})
    with pytest.raises(ValueError, match="conditions"):
        status_apply(Writer.RECONCILER, {"conditions": [metrics]})
    mixed = {
        "replicas": 2,
        "controller": {},
        "conditions": [_condition("Ready", "True", "A"), metrics],
    }
    assert owned_status(mixed, Writer.CONTROLLER) == {"controller": {}, "conditions": [metrics]}


def test_a_reconciliation_keeps_what_the_control_loop_writes_meanwhile() -> None:
    """The control loop's MetricsAvailable and decision land while a reconciliation that read
    the object before them is under way: neither is dropped nor taken back."""
    store = _Store(_example())
    _reconcile(store)
    assert _conditions(store)["Ready"] == ("False", "ReplicasNotReady")
    written = _controller_status(store.service)
    landed: list[bool] = []

    def controller_writes() -> None:
        if not landed:
            landed.append(True)
            store.apply_status(store.service, written, Writer.CONTROLLER)

    store.on_get = controller_writes
    store.children[("Deployment", "llama")]["status"] = {"replicas": 1, "readyReplicas": 0}
    _reconcile(store)
    assert landed
    assert _conditions(store)["MetricsAvailable"] == ("False", "NoObservations")
    assert store.service["status"]["lastDecision"]["reasonCode"] == "MetricsUnavailable"
    assert store.service["status"]["replicas"] == 1  # and the reconciliation's own news landed


def test_a_tick_planned_before_a_degraded_report_neither_drops_nor_reverts_it() -> None:
    """The control loop plans on an object read before the reconciler reported Degraded; its
    write leaves the reconciler's conditions as they are now."""
    store = _Store(_example())
    _reconcile(store)
    before = copy.deepcopy(store.service)
    owned = owned_status(store.service["status"], Writer.RECONCILER)
    conditions = [c for c in owned["conditions"] if c["type"] != "Degraded"]
    degraded = _condition("Degraded", "True", "ChildRefused")
    reported = status_apply(Writer.RECONCILER, {**owned, "conditions": [*conditions, degraded]})
    store.apply_status(store.service, reported, Writer.RECONCILER)
    store.apply_status(store.service, _controller_status(before), Writer.CONTROLLER)
    assert _conditions(store)["Degraded"] == ("True", "ChildRefused")
    assert set(_conditions(store)) == set(CONDITION_OWNERS)
    managers = {m["manager"] for m in store.service["metadata"]["managedFields"]}
    assert managers == {Writer.RECONCILER, Writer.CONTROLLER}


def test_the_loops_choice_is_recorded_before_the_deployment_is_rendered_with_it() -> None:
    """Recorded first, a choice survives an operator stopped before the render: the next
    reconciliation renders what status says. Rendered first, it would be rolled back."""
    store = _Store(_example())
    _reconcile(store)
    spec = apply_defaults(parse_service(store.service).spec)
    choice = speculative_config_status(spec, SpecConfig.static(5), "Controller")
    store.writes.clear()
    reconcile(
        cast(Kube, store),
        store.service,
        RenderOptions(),
        lambda *_: None,
        choice=choice.model_dump(by_alias=True, exclude_none=True, mode="json"),
    )
    assert store.writes[:2] == ["status", "Deployment"]
    recorded = store.service["status"]["speculativeConfig"]
    assert (recorded["source"], recorded["numSpeculativeTokens"]) == ("Controller", 5)
    managers = {m["manager"] for m in store.service["metadata"]["managedFields"]}
    assert managers == {Writer.RECONCILER}  # the control loop never writes it


# The status an operator before the per-writer managers merge-patched, as the API server
# records it (trimmed): one entry for the manager "specops" on the status subresource.
_OLD_ENTRY = {
    "manager": "specops",
    "operation": "Update",
    "apiVersion": VERSION,
    "fieldsType": "FieldsV1",
    "subresource": "status",
    "fieldsV1": {
        "f:status": {
            ".": {},
            "f:conditions": {
                ".": {},
                'k:{"type":"MetricsAvailable"}': {".": {}, "f:status": {}, "f:type": {}},
                'k:{"type":"Ready"}': {".": {}, "f:status": {}, "f:type": {}},
            },
            "f:lastDecision": {".": {}, "f:action": {}},
            "f:observedGeneration": {},
            "f:speculativeConfig": {".": {}, "f:enabled": {}, "f:json": {}},
        }
    },
}
_SPEC_ENTRY = {
    "manager": "kubectl-client-side-apply",
    "operation": "Update",
    "apiVersion": VERSION,
    "fieldsType": "FieldsV1",
    "fieldsV1": {"f:spec": {"f:replicas": {}}},
}


def test_the_old_managers_status_is_handed_to_each_writer_by_the_table() -> None:
    reconciler = {
        "manager": "specops-reconciler",
        "operation": "Apply",
        "apiVersion": VERSION,
        "fieldsType": "FieldsV1",
        "subresource": "status",
        "fieldsV1": {"f:status": {"f:selector": {}}},
    }
    managed = handed_over([_SPEC_ENTRY, _OLD_ENTRY, reconciler], VERSION)
    assert managed is not None
    by_manager = {m["manager"]: m for m in managed}
    assert set(by_manager) == {"kubectl-client-side-apply", *Writer}  # the old one is gone
    assert by_manager["kubectl-client-side-apply"] == _SPEC_ENTRY
    mine = by_manager[Writer.RECONCILER]["fieldsV1"]["f:status"]
    assert {"f:selector", "f:observedGeneration", "f:speculativeConfig"} <= set(mine)
    assert set(mine["f:conditions"]) == {".", 'k:{"type":"Ready"}'}
    theirs = by_manager[Writer.CONTROLLER]
    assert (theirs["operation"], theirs["subresource"]) == ("Apply", "status")
    assert set(theirs["fieldsV1"]["f:status"]) == {".", "f:conditions", "f:lastDecision"}
    assert set(theirs["fieldsV1"]["f:status"]["f:conditions"]) == {
        ".",
        'k:{"type":"MetricsAvailable"}',
    }
    assert handed_over(managed, VERSION) is None  # once only
    assert handed_over([_SPEC_ENTRY], VERSION) is None


_KEEP = {"time": "2026-01-01T00:00:00Z", "action": "Keep", "reason": "nothing pays"}


def test_after_an_upgrade_a_field_no_writer_sends_is_removed() -> None:
    """An object whose status an older operator merge-patched: its json (speculation on) is
    the old manager's too, so once speculation is off only the hand-over lets it go."""
    body = _example()
    body["spec"]["speculation"]["mode"] = "Off"
    body["status"] = {
        "observedGeneration": 1,
        "conditions": [
            _condition("Ready", "True", "AllReplicasReady"),
            _condition("MetricsAvailable", "Unknown", "AwaitingController"),
        ],
        "lastDecision": _KEEP,
        "speculativeConfig": {"enabled": True, "json": '{"num_speculative_tokens":3}'},
    }
    body["metadata"]["managedFields"] = [_SPEC_ENTRY, _OLD_ENTRY]
    store = _Store(body)
    _reconcile(store)
    status = store.service["status"]
    assert status["speculativeConfig"]["enabled"] is False
    assert "json" not in status["speculativeConfig"]
    assert status["observedGeneration"] == 2
    # The control loop's fields are its own now, and stay until it writes them itself.
    assert _conditions(store)["MetricsAvailable"] == ("Unknown", "AwaitingController")
    assert status["lastDecision"] == _KEEP
    managers = {m["manager"] for m in store.service["metadata"]["managedFields"]}
    assert managers == {"kubectl-client-side-apply", *Writer}
    store.apply_status(store.service, _controller_status(store.service), Writer.CONTROLLER)
    assert _conditions(store)["MetricsAvailable"] == ("False", "NoObservations")
    assert store.service["status"]["lastDecision"]["action"] == "Withhold"
