"""What one child's server-side apply reports, against a stand-in for the API server."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
import yaml
from specops_lab.demo import engine_config
from specops_operator import Kube, KubeApiError
from specops_operator._kube import CONFLICT
from specops_operator._reconcile import _apply, reconcile

from specops.api import parse_service
from specops.policy import SpecConfig
from specops.render import (
    HASH_ANNOTATION,
    OWNER_UID_LABEL,
    RenderOptions,
    plan,
    selector_labels,
    speculative_config_status,
)
from tests.operator.kmock_env import server_side_apply

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama.yaml"
Obj = dict[str, Any]
Answer = Callable[[Obj, Obj | None], Obj]


class _Server:
    """Holds one object; an apply answers what ``answer`` makes of the applied body."""

    def __init__(self, live: Obj | None, answer: Answer) -> None:
        self.live, self.answer, self.calls = live, answer, list[str]()

    def get(self, obj: Obj, *, fresh: bool = False) -> Obj | None:
        self.calls.append("get")
        return copy.deepcopy(self.live)

    def apply(self, obj: Obj) -> Obj:
        """Refuses an apply whose resourceVersion precondition is stale, as the API server does."""
        self.calls.append("apply")
        wanted = obj["metadata"].get("resourceVersion")
        if wanted is not None and wanted != (self.live or {})["metadata"]["resourceVersion"]:
            raise KubeApiError("the object has been modified", CONFLICT)
        body = copy.deepcopy(obj)
        body["metadata"].pop("resourceVersion", None)
        self.live = self.answer(body, self.live)
        return copy.deepcopy(self.live)


def _stored(obj: Obj, version: str) -> Obj:
    """``obj`` as the server keeps it: with server fields the render never sets."""
    stored = copy.deepcopy(obj)
    stored["metadata"].update(resourceVersion=version, managedFields=[{"manager": "specops"}])
    stored["spec"]["progressDeadlineSeconds"] = 600
    stored["status"] = {"replicas": 2}
    return stored


def _applied(desired: Obj, live: Obj | None) -> Obj:
    """The server took the applied fields: a new version of the object."""
    version = str(int((live or {}).get("metadata", {}).get("resourceVersion", "0")) + 1)
    return _stored(desired, version)


def _unchanged(desired: Obj, live: Obj | None) -> Obj:
    """The server found nothing to change: the same version comes back."""
    assert live is not None
    return live


@pytest.fixture
def desired() -> Obj:
    service = parse_service(yaml.safe_load(EXAMPLE.read_text()))
    deployment: Obj = copy.deepcopy(plan(service, RenderOptions()).objects[0])
    return deployment


def _engine(obj: Obj) -> Obj:
    container: Obj = obj["spec"]["template"]["spec"]["containers"][0]
    return container


def _run(server: _Server, desired: Obj) -> str | None:
    kube = cast(Kube, server)
    action, live = _apply(kube, desired, kube.get(desired))
    assert live == server.live
    return action


def test_a_missing_child_is_created_by_the_apply(desired: Obj) -> None:
    server = _Server(None, _applied)
    assert _run(server, desired) == "created"
    assert server.calls == ["get", "apply"]


def test_an_unchanged_child_costs_one_get(desired: Obj) -> None:
    server = _Server(_stored(desired, "7"), _applied)
    assert server.live is not None
    server.live["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = "now"
    assert _run(server, desired) is None
    assert server.calls == ["get"]


def test_a_new_render_updates(desired: Obj) -> None:
    server = _Server(_stored(desired, "7"), _applied)
    desired["metadata"]["annotations"][HASH_ANNOTATION] = "a-new-render"
    assert _run(server, desired) == "updated"
    assert server.calls == ["get", "apply"]


@pytest.mark.parametrize("field", ["replicas", "env value"])
def test_an_edit_of_an_owned_field_is_reverted(desired: Obj, field: str) -> None:
    edited = _stored(desired, "7")
    if field == "replicas":
        edited["spec"]["replicas"] = 5
    else:
        _engine(edited)["env"][0]["value"] = "/elsewhere"
    server = _Server(edited, _applied)
    assert _run(server, desired) == "reverted"
    assert server.live is not None
    assert (server.live["spec"]["replicas"], _engine(server.live)["env"]) == (
        2,
        _engine(desired)["env"],
    )


def test_an_edit_between_the_read_and_the_apply_is_reported_reverted(desired: Obj) -> None:
    """The apply names the version it read: an edit landing after the read makes the server
    refuse it, and the apply against the object read again reports what it took back. (A
    list entry of another manager makes every reconciliation apply, so this race is common.)"""
    shared = _stored(desired, "7")
    _engine(shared)["env"].append({"name": "PLATFORM_TRACE", "value": "1"})
    server = _Server(shared, _applied)
    kube = cast(Kube, server)
    read = kube.get(desired)
    assert server.live is not None
    server.live["spec"]["replicas"] = 5
    server.live["metadata"]["resourceVersion"] = "8"
    action, live = _apply(kube, desired, read)
    assert action == "reverted"
    assert server.calls == ["get", "apply", "get", "apply"]
    assert live["spec"]["replicas"] == 2


def test_an_object_rewritten_faster_than_a_round_trip_is_applied_at_last(desired: Obj) -> None:
    """Refused at every try, the apply goes ahead without a precondition in the end."""
    shared = _stored(desired, "7")
    shared["spec"]["replicas"] = 5
    server = _Server(shared, _applied)
    versions = iter(range(8, 100))

    def moving(obj: Obj, *, fresh: bool = False) -> Obj | None:
        """The object as read, rewritten (by a controller's status write) right after."""
        server.calls.append("get")
        assert server.live is not None
        read = copy.deepcopy(server.live)
        server.live["metadata"]["resourceVersion"] = str(next(versions))
        return read

    server.get = moving  # type: ignore[method-assign]
    kube = cast(Kube, server)
    action, live = _apply(kube, desired, kube.get(desired))
    assert action == "reverted"
    assert server.calls == ["get", *["apply", "get"] * 3, "apply"]
    assert live["spec"]["replicas"] == 2


def test_an_entry_another_manager_added_is_no_change(desired: Obj) -> None:
    """An env var in the engine's list fails ``covers``; the apply keeps it and changes nothing."""
    shared = _stored(desired, "7")
    _engine(shared)["env"].append({"name": "PLATFORM_TRACE", "value": "1"})
    server = _Server(shared, _unchanged)
    assert _run(server, desired) is None
    assert server.calls == ["get", "apply"]


def test_what_the_deployment_controller_wrote_meanwhile_is_no_change(desired: Obj) -> None:
    """Its revision annotation and status, written between the read and the apply, are not
    a revert of the operator's fields."""
    shared = _stored(desired, "7")
    _engine(shared)["env"].append({"name": "PLATFORM_TRACE", "value": "1"})

    def status_moved(applied: Obj, live: Obj | None) -> Obj:
        assert live is not None
        moved = copy.deepcopy(live)
        moved["metadata"]["resourceVersion"] = "8"
        moved["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "4"
        moved["status"] = {"replicas": 3}
        return moved

    assert _run(_Server(shared, status_moved), desired) is None


class _Cluster:
    """Holds every child; a read's answer takes a while to arrive, as over the network, so two
    callers overlap."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Obj] = {}
        self.applies: list[str] = []
        self.status_patches: list[Obj] = []
        self.services: dict[str, Obj] = {}
        self.guard = threading.Lock()

    @staticmethod
    def _key(obj: Obj) -> tuple[str, str]:
        return obj["kind"], obj["metadata"]["name"]

    def get(self, obj: Obj, *, fresh: bool = False) -> Obj | None:
        with self.guard:
            seen = copy.deepcopy(self.objects.get(self._key(obj)))
        time.sleep(0.1)
        return seen

    def held(self, obj: Obj) -> Obj | None:
        """A client without a watch cache reads the API server here too."""
        return self.get(obj)

    def apply(self, obj: Obj) -> Obj:
        with self.guard:
            self.applies.append(obj["kind"])
            version = str(len(self.applies))
            self.objects[self._key(obj)] = _stored(obj, version) if "spec" in obj else obj
            return copy.deepcopy(self.objects[self._key(obj)])

    def has_api_group(self, group: str) -> bool:
        return False

    def get_service(self, namespace: str, name: str) -> Obj | None:
        with self.guard:
            return copy.deepcopy(self.services.get(name))

    def apply_status(self, service: Obj, status: Obj, manager: str) -> Obj:
        with self.guard:
            self.status_patches.append(status)
            name = service["metadata"]["name"]
            stored = server_side_apply(self.services[name], status, manager, "specops.io/v1alpha1")
            self.services[name] = stored
            return copy.deepcopy(stored)


def test_reconciliations_of_one_service_take_turns() -> None:
    """Two triggers at once (the create handler, and the Deployment it made waking the handler
    of owned Deployments) create and announce each child once."""
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update(namespace="ml", uid="uid-llama-1")
    cluster = _Cluster()
    cluster.services["llama"] = copy.deepcopy(body)
    events: list[str] = []
    together = threading.Barrier(2)

    def run() -> None:
        together.wait()
        reconcile(cast(Kube, cluster), body, RenderOptions(), lambda t, r, m: events.append(m))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(cluster.applies) == ["Deployment", "PodDisruptionBudget", "Service"]
    assert sorted(events) == [
        "Deployment llama created",
        "PodDisruptionBudget llama-pdb created",
        "Service llama created",
    ]


def test_a_hand_edited_status_is_refused_with_a_warning_and_the_spec_is_rendered() -> None:
    """status.speculativeConfig claiming the controller chose k=20 with another draft model
    (the spec allows 1-5 and names its own) renders the spec's starting point instead."""
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update(namespace="ml", uid="uid-llama-1")
    spec = plan(parse_service(body), RenderOptions()).spec
    honest = speculative_config_status(spec, SpecConfig.static(4), "Controller")
    forged = honest.model_dump(by_alias=True, mode="json") | {
        "numSpeculativeTokens": 20,
        "draftModel": "attacker/evil-draft",
        "json": json.dumps({"model": "attacker/evil-draft", "num_speculative_tokens": 20}),
    }
    body["status"] = {"speculativeConfig": forged}
    cluster = _Cluster()
    cluster.services["llama"] = copy.deepcopy(body)
    events: list[tuple[str, str, str]] = []
    reconcile(cast(Kube, cluster), body, RenderOptions(), lambda *e: events.append(e))
    deployment = cluster.objects[("Deployment", "llama")]
    engine = json.loads(engine_config(deployment) or "")
    assert engine["num_speculative_tokens"] == 3  # the spec's initial k
    assert engine["model"] == spec.speculation.draft_model
    ((kind, _, message),) = [e for e in events if e[1] == "StatusRefused"]
    assert kind == "Warning"
    assert "k=20 is outside spec.speculation.numSpeculativeTokens (min 1, max 5)" in message
    written = cluster.status_patches[-1]["speculativeConfig"]
    assert written["numSpeculativeTokens"] == 3 and written["source"] == "Spec"
    assert "evil" not in json.dumps(written)


def test_a_users_object_with_a_childs_name_is_never_adopted_and_is_warned_about_once() -> None:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update(namespace="ml", uid="uid-llama-1")
    cluster = _Cluster()
    cluster.services["llama"] = copy.deepcopy(body)
    users = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }
    cluster.objects[("Service", "llama")] = copy.deepcopy(users)
    events: list[tuple[str, str, str]] = []
    reconcile(cast(Kube, cluster), body, RenderOptions(), lambda *e: events.append(e))
    assert cluster.objects[("Service", "llama")] == users  # untouched, not adopted
    assert sorted(cluster.applies) == ["Deployment", "PodDisruptionBudget"]
    taken = [e for e in events if e[1] == "NameTaken"]
    assert [e[0] for e in taken] == ["Warning"]
    assert "Service ml/llama already exists, not owned by this SpeculativeService" in taken[0][2]
    status = cluster.status_patches[-1]
    (degraded,) = [c for c in status["conditions"] if c["type"] == "Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "NameTaken")
    assert "rename or delete it" in degraded["message"]

    # the next resync reads the conflict from status: no second Warning
    events.clear()
    reconcile(cast(Kube, cluster), body, RenderOptions(), lambda *e: events.append(e))
    assert not [e for e in events if e[1] == "NameTaken"]

    del cluster.objects[("Service", "llama")]  # the user removes theirs: ours is created
    reconcile(cast(Kube, cluster), body, RenderOptions(), lambda *e: events.append(e))
    ours = cluster.objects[("Service", "llama")]
    assert ours["metadata"]["ownerReferences"][0]["uid"] == "uid-llama-1"
    conditions = cluster.status_patches[-1]["conditions"]
    assert not [c for c in conditions if c["reason"] == "NameTaken"]


def test_a_reconciliation_renders_the_object_as_it_is_once_its_turn_comes() -> None:
    """A trigger's copy may predate an edit (or the status the turn before wrote): the
    object is read again after taking the turn, and one deleted meanwhile is left alone."""
    stale = yaml.safe_load(EXAMPLE.read_text())
    stale["metadata"].update(namespace="ml", uid="uid-llama-1")
    edited = copy.deepcopy(stale)
    edited["spec"]["replicas"] = 3
    cluster = _Cluster()
    cluster.services["llama"] = edited
    reconcile(cast(Kube, cluster), stale, RenderOptions(), lambda *_: None)
    assert cluster.objects[("Deployment", "llama")]["spec"]["replicas"] == 3
    gone = _Cluster()
    outcome = reconcile(cast(Kube, gone), stale, RenderOptions(), lambda *_: None)
    assert outcome.writes == () and gone.applies == []


def test_a_deployment_made_before_the_uid_selector_keeps_it_and_is_not_rewritten() -> None:
    """A live Deployment this service owns, selecting without the owner's uid (as one the
    operator made before it selected by uid): the render keeps its selector, so nothing is
    rewritten and no pod rolls; the Service and PDB select the same pods."""
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update(namespace="ml", uid="uid-llama-1")
    service = parse_service(body)
    legacy = selector_labels("llama")
    before = copy.deepcopy(list(plan(service, RenderOptions(), legacy).objects))
    kopf.adopt(before, owner=cast(kopf.Body, body))
    cluster = _Cluster()
    cluster.services["llama"] = copy.deepcopy(body)
    for child in before:
        cluster.objects[cluster._key(child)] = _stored(child, "1")
    events: list[str] = []
    reconcile(cast(Kube, cluster), body, RenderOptions(), lambda t, r, m: events.append(m))
    assert cluster.applies == [] and events == []
    assert cluster.objects[("Service", "llama")]["spec"]["selector"] == legacy
    assert cluster.status_patches[-1]["selector"] == (
        "app.kubernetes.io/name=vllm,app.kubernetes.io/instance=llama"
    )


def test_a_new_deployment_selects_by_the_owners_uid() -> None:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update(namespace="ml", uid="uid-llama-1")
    cluster = _Cluster()
    cluster.services["llama"] = copy.deepcopy(body)
    reconcile(cast(Kube, cluster), body, RenderOptions(), lambda t, r, m: None)
    wanted = {**selector_labels("llama"), OWNER_UID_LABEL: "uid-llama-1"}
    deployment = cluster.objects[("Deployment", "llama")]
    assert deployment["spec"]["selector"]["matchLabels"] == wanted
    assert cluster.objects[("Service", "llama")]["spec"]["selector"] == wanted
    assert cluster.objects[("PodDisruptionBudget", "llama-pdb")]["spec"]["selector"] == {
        "matchLabels": wanted
    }
