"""Two operator replicas with the chart's peering on a real control plane: one acts, the
other stands by, and takes over when the active one stops (a rolling update's handover).

Both run here as the chart's ServiceAccount with the arguments of the chart's Deployment,
so they are the two replicas ``replicaCount: 2`` with ``operator.peering.enabled`` makes;
they watch the test's namespace only, so nothing else in the cluster reaches their logs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from specops_lab.cluster import ClusterInfo
from specops_lab.launch import ChartRelease, OperatorProcess, installed_chart, operator_kubeconfig

from e2e.harness import Kubectl, Wait, apply, example, filled

pytestmark = pytest.mark.e2e

PEERING = "e2e-ha"
PRIORITY = re.compile(rf"peering {PEERING} at priority (\d+)")
RESUMED = "Resuming operations after the pause"
HANDLED = "Handler 'service_changed' succeeded"


@pytest.fixture
def release(cluster: ClusterInfo, namespace: str) -> Iterator[ChartRelease]:
    values = {
        "replicaCount": 2,
        "operator": {
            "watchNamespaces": [namespace],
            "peering": {"enabled": True, "name": PEERING},
        },
    }
    with installed_chart(
        cluster.kubeconfig,
        release="specops-ha",
        namespace="specops-ha",
        values=values,
        operator_replicas=0,
    ) as installed:
        yield installed


def _log(replica: OperatorProcess) -> str:
    return replica.process.log.read_text(errors="replace")


def _priority(replica: OperatorProcess) -> int:
    """The peering priority the replica drew, from its log."""
    found = PRIORITY.search(_log(replica))
    assert found, f"no peering priority in {replica.process.log}"
    return int(found.group(1))


def test_one_replica_acts_and_the_other_takes_over_when_it_stops(
    cluster: ClusterInfo,
    api_client: client.ApiClient,
    kubectl: Kubectl,
    wait: Wait,
    namespace: str,
    release: ChartRelease,
    tmp_path: Path,
) -> None:
    args = [a for a in release.operator_args if a.startswith(("--peering", "--namespace"))]
    assert sorted(args) == [f"--namespace={namespace}", f"--peering={PEERING}"]
    identity = operator_kubeconfig(cluster.kubeconfig, release, tmp_path / "kubeconfig")
    replicas = [
        OperatorProcess(identity, tmp_path / f"operator-{i}.log", extra_args=args) for i in range(2)
    ]
    try:
        for replica in replicas:
            replica.start()
        # kopf starts paused and resumes only when no live peer outranks it.
        active, standby = sorted(replicas, key=_priority, reverse=True)
        wait(lambda: RESUMED in _log(active), "the replica of the higher priority to act")

        doc = example(namespace)
        name = doc["metadata"]["name"]
        apply(kubectl, tmp_path, doc)
        apps = client.AppsV1Api(api_client)

        def replicas_of_deployment() -> int | None:
            try:
                found = apps.read_namespaced_deployment(name, namespace)
            except client.ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            return int(filled(found.spec.replicas))

        wait(lambda: replicas_of_deployment() == doc["spec"]["replicas"], "the Deployment")
        # The handler logs its success once it has also written the rest and the status.
        wait(lambda: HANDLED in _log(active), "the active replica's handler to finish")
        assert HANDLED not in _log(standby)

        resumed = _log(standby).count(RESUMED)  # once already, if it started first, alone
        active.stop()  # graceful: kopf takes itself out of the peering at once
        wait(lambda: _log(standby).count(RESUMED) > resumed, "the standby to resume")
        kubectl("scale", "specsvc", name, "-n", namespace, "--replicas=3")
        wait(lambda: replicas_of_deployment() == 3, "the former standby to reconcile a change")
        wait(lambda: HANDLED in _log(standby), "the former standby's handler to finish")
    finally:
        for replica in replicas:
            replica.stop()
