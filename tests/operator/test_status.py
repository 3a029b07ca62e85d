"""Status derivation and the write decisions of the reconciler, without a cluster."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from specops_operator import covers, desired_status
from specops_operator._status import degraded_conditions

from specops.api import parse_service
from specops.render import RenderOptions, plan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama.yaml"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _service(status: dict[str, Any] | None = None) -> Any:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["generation"] = 4
    if status is not None:
        body["status"] = status
    return parse_service(body)


def _deployment(ready: int, updated: int, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"generation": 2},
        "status": {
            "observedGeneration": 2,
            "replicas": 2,
            "readyReplicas": ready,
            "updatedReplicas": updated,
            **extra,
        },
    }


def _conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_rolled_out_deployment_is_ready_and_speculating() -> None:
    service = _service()
    status = desired_status(service, plan(service, RenderOptions()), _deployment(2, 2), NOW)
    assert _conditions(status) == {
        "Ready": ("True", "AllReplicasReady"),
        "Progressing": ("False", "RolloutComplete"),
        "Degraded": ("False", "AsExpected"),
        "SpeculationActive": ("True", "Speculating"),
    }  # MetricsAvailable is the control loop's to write
    assert (status["observedGeneration"], status["replicas"], status["readyReplicas"]) == (4, 2, 2)
    assert status["speculativeConfig"]["source"] == "Spec"
    assert all(c["lastTransitionTime"] == NOW.isoformat() for c in status["conditions"])


def test_rollout_in_progress_and_failed_rollout() -> None:
    service = _service()
    rolling = desired_status(service, plan(service, RenderOptions()), _deployment(2, 1), NOW)
    assert _conditions(rolling)["Progressing"] == ("True", "RollingOut")
    assert _conditions(rolling)["Ready"] == ("False", "ReplicasNotReady")
    # All pods updated but none ready yet: still rolling out, not complete.
    starting = desired_status(service, plan(service, RenderOptions()), _deployment(0, 2), NOW)
    assert _conditions(starting)["Progressing"] == ("True", "RollingOut")
    stuck = _deployment(
        1,
        1,
        conditions=[
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
        ],
    )
    failed = desired_status(service, plan(service, RenderOptions()), stuck, NOW)
    assert _conditions(failed)["Degraded"] == ("True", "ProgressDeadlineExceeded")
    missing = desired_status(service, plan(service, RenderOptions()), None, NOW)
    assert _conditions(missing)["Ready"] == ("False", "DeploymentMissing")


def test_transition_times_survive_and_the_controllers_condition_is_left_to_it() -> None:
    earlier = "2025-12-31T00:00:00+00:00"
    previous = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "AllReplicasReady",
                "lastTransitionTime": earlier,
            },
            {
                "type": "MetricsAvailable",
                "status": "True",
                "reason": "Scraped",
                "message": "ok",
                "lastTransitionTime": earlier,
            },
        ]
    }
    service = _service(previous)
    status = desired_status(service, plan(service, RenderOptions()), _deployment(2, 2), NOW)
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Ready"]["lastTransitionTime"] == earlier
    assert by_type["Progressing"]["lastTransitionTime"] == NOW.isoformat()
    # The control loop's condition is its own to write: the reconciler neither keeps nor drops it.
    assert "MetricsAvailable" not in by_type


def test_covers_ignores_server_fields_but_not_edits() -> None:
    desired = {"spec": {"replicas": 2, "template": {"containers": [{"name": "a", "args": ["x"]}]}}}
    live = {
        "spec": {
            "replicas": 2,
            "paused": False,
            "template": {"containers": [{"name": "a", "args": ["x"], "tty": False}]},
        }
    }
    assert covers(desired, live)
    assert not covers(desired, {"spec": {**live["spec"], "replicas": 7}})
    edited = {"spec": {"replicas": 2, "template": {"containers": [{"name": "a", "args": ["y"]}]}}}
    assert not covers(desired, edited)
    assert not covers(desired, {"spec": {"replicas": 2, "template": {"containers": []}}})


def test_a_failure_is_reported_once_as_degraded() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "X", "message": ""}
    first = degraded_conditions([ready], "InvalidSpec", "bad", NOW)
    assert first is not None
    assert [c["type"] for c in first] == ["Ready", "Degraded"]
    assert (first[1]["status"], first[1]["reason"], first[1]["message"]) == (
        "True",
        "InvalidSpec",
        "bad",
    )
    assert degraded_conditions(first, "InvalidSpec", "bad", NOW) is None  # nothing new
    other = degraded_conditions(first, "ChildRefused", "no", NOW)
    assert other is not None and [c["reason"] for c in other] == ["X", "ChildRefused"]
