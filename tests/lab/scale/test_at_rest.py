"""When the benchmark's fleet is at rest: a Deployment's status caught up with its pods."""

from __future__ import annotations

from typing import Any

from specops_lab.scale._run import _at_rest


def _deployment(generation: int = 2, **status: Any) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "spec": {"replicas": 5}, "status": status}


def test_a_deployment_is_at_rest_once_its_status_is_current_and_counts_every_replica() -> None:
    settled = {"observedGeneration": 2, "replicas": 5, "updatedReplicas": 5, "readyReplicas": 5}
    assert _at_rest(_deployment(**settled))
    # Pods running, but the controller-manager has not yet counted them all ready.
    assert not _at_rest(_deployment(**{**settled, "readyReplicas": 3}))
    # A status from before the last change of the spec.
    assert not _at_rest(_deployment(generation=3, **settled))
    # A rollout still replacing old pods.
    assert not _at_rest(_deployment(**{**settled, "replicas": 6}))
    assert not _at_rest(_deployment())
