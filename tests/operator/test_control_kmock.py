"""The control loop inside the real kopf operator, against kmock, with a fake observation source.

The source (the seam the operator's direct and Prometheus fetchers sit behind) serves
what the test sets: a load, an acceptance, fresh or stale. The clock is the real one plus
an offset the test moves, so dwell times and rollout deadlines pass without waiting.
kmock runs no Deployment controller, so new pods never become Ready unless the test
writes the Deployment's status.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kopf
import pytest
from prometheus_client import REGISTRY
from specops_operator._control import ControlLoopOptions
from specops_operator._fetch import Fetched, PodTarget
from specops_operator._kube import Kube
from specops_operator._owners import CONDITION_OWNERS, Writer

from specops.api import SpeculativeServiceSpec, parse_service
from specops.observation import EstimateStatus
from specops.render import apply_defaults, speculation_from_spec, speculative_config_status
from tests.control.observations import pod_observation
from tests.operator.kmock_env import (
    NS,
    SVC_PATH,
    ApplyingEmulator,
    eventually,
    live,
    run_operator,
    service_body,
)

pytestmark = [pytest.mark.integration, pytest.mark.kmock(cls=ApplyingEmulator)]

# A reconfiguration, made because the gain is likely or as a probe of an unmeasured k.
RECONFIGURED = (("Reconfigure", "GainPaysRestart"), ("Reconfigure", "ProbeUnmeasuredK"))
SERVICE = "specops.io/v1alpha1/speculativeservices"
DEPLOYMENT = "apps/v1/deployments"


class FakeCluster:
    """The pods' observations as the test sets them, stamped with the operator's clock."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.k = 3
        self.running: list[float] = [2.0] * 40
        self.status = EstimateStatus.OK
        self.fetches = 0
        self.samples = 0
        self.interval: float | None = None
        self.forgotten: list[tuple[str, str]] = []
        self.tpot_s = 0.010
        # What a canary's pods report while one runs: their k (None: the fleet's) and TPOT.
        self.canary_k: int | None = None
        self.canary_tpot_s = 0.008
        self.canary_fetches = 0

    def now(self) -> float:
        return time.time() + self.offset

    def sampling_interval(self, spec: SpeculativeServiceSpec) -> float | None:
        return self.interval

    async def sample(
        self, namespace: str, name: str, spec: SpeculativeServiceSpec, *, canary: bool = False
    ) -> None:
        self.samples += 1

    def forget(self, namespace: str, name: str) -> None:
        self.forgotten.append((namespace, name))

    async def fetch(
        self,
        namespace: str,
        name: str,
        spec: SpeculativeServiceSpec,
        pods: Sequence[PodTarget],
        *,
        canary: bool = False,
    ) -> Fetched:
        at = self.now() if self.status is EstimateStatus.OK else self.now() - 900
        names: tuple[str, ...]
        if canary:
            self.canary_fetches += 1
            k, tpot, names = self.canary_k or self.k, self.canary_tpot_s, ("llama-canary-a",)
        else:
            self.fetches += 1
            k, tpot, names = self.k, self.tpot_s, ("llama-a", "llama-b")
        return Fetched(
            tuple(
                pod_observation(
                    pod,
                    at=at,
                    running=self.running,
                    k=k,
                    alpha=0.8,
                    status=self.status,
                    tpot_s=tpot,
                )
                for pod in names
            )
        )


def _body(mode: str = "Auto") -> dict[str, Any]:
    body = service_body()
    body["spec"]["speculation"]["mode"] = mode
    body["spec"]["policy"].update(
        evaluationWindowSeconds=60,
        minDwellSeconds=60,
        restartCostSeconds=10,
        rolloutTimeoutSeconds=60,
        rollbackCooldownSeconds=600,
        # These tests follow a change made on the prediction; the canary has its own.
        canary={"enabled": False},
    )
    return body


def _status(kmock: Any) -> dict[str, Any]:
    status: dict[str, Any] = (live(kmock, SERVICE, "llama") or {}).get("status", {})
    return status


async def _reconfigured(kmock: Any, body: dict[str, Any]) -> dict[str, Any]:
    """Create the service, wait for the loop to reconfigure it, and return the recorded config."""
    async with kmock.post(SVC_PATH, json=body) as response:
        assert response.status in (200, 201)
    await eventually(lambda: _decision(kmock) in RECONFIGURED, "reconf")
    await eventually(
        lambda: _status(kmock)["speculativeConfig"]["source"] == "Controller", "recorded"
    )
    config: dict[str, Any] = _status(kmock)["speculativeConfig"]
    return config


def _decision(kmock: Any) -> tuple[str, str] | None:
    last = _status(kmock).get("lastDecision")
    return (last["action"], last["reasonCode"]) if last else None


def _applies(kmock: Any) -> int:
    """Status applies of the control loop."""
    return sum(
        1
        for r in list(kmock)
        if r.method.value == "PATCH" and r.params.get("fieldManager") == "specops-controller"
    )


def _engine_config(kmock: Any) -> dict[str, Any] | None:
    deployment = live(kmock, DEPLOYMENT, "llama")
    if deployment is None:
        return None
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    config: dict[str, Any] = json.loads(args[args.index("--speculative-config") + 1])
    return config


def _events(kmock: Any) -> list[dict[str, Any]]:
    """Every Event the operator posted (kmock stores only the first of a name)."""
    return [
        r.data
        for r in list(kmock)
        if r.method.value == "POST" and r.resource is not None and r.resource.plural == "events"
    ]


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, {"namespace": NS, "service": "llama", **labels}) or 0.0


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def memo(cluster: FakeCluster) -> kopf.Memo:
    options = ControlLoopOptions(
        source=cluster, clock=cluster.now, period_s=0.3, initial_delay_s=0.0, rollout_poll_s=0.3
    )
    return kopf.Memo(control=options)


async def test_low_load_lengthens_speculation_and_a_failed_rollout_rolls_back(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster, memo: Any
) -> None:
    reconfigured = _sample("specops_reconfigurations_total")
    rollbacks = _sample("specops_rollbacks_total")
    async with run_operator(kmock, tmp_path, monkeypatch, memo):
        async with kmock.post(SVC_PATH, json=_body()) as response:
            assert response.status in (200, 201)
        await eventually(lambda: _engine_config(kmock) is not None, "Deployment rendered")

        # Two pods at two running requests each: the policy wants longer drafts there (a
        # probe while the step time at that k is unmeasured).
        await eventually(lambda: _decision(kmock) in RECONFIGURED, "reconf")
        decided = _decision(kmock)
        assert decided is not None
        code = decided[1]
        status = _status(kmock)
        # The choice is rendered and recorded by the reconciliation the decision hands it to.
        await eventually(
            lambda: _status(kmock)["speculativeConfig"]["source"] == "Controller",
            "the choice recorded in status.speculativeConfig",
        )
        config = _status(kmock)["speculativeConfig"]
        assert config["numSpeculativeTokens"] > 3
        decision = status["lastDecision"]
        assert decision["applied"] and decision["predictedGainPercent"] > 5
        assert decision["crossovers"] and decision["recommended"]["json"] == config["json"]
        assert status["controller"]["rollout"]["target"]["numSpeculativeTokens"] > 3
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions["MetricsAvailable"]["status"] == "True"
        assert status["lastMeasurements"]["concurrency"] == pytest.approx(2.0)
        assert status["lastMeasurements"]["acceptanceLength"] == pytest.approx(2.952)
        # The Deployment is re-rendered with the new --speculative-config at once.
        await eventually(
            lambda: (
                (_engine_config(kmock) or {}).get("num_speculative_tokens")
                == config["numSpeculativeTokens"]
            ),
            "Deployment re-rendered",
        )
        engine = _engine_config(kmock)
        assert engine is not None and json.dumps(engine, separators=(",", ":")) == config["json"]
        # At a steady batch of 2 the best table drafts one k there, and a table costs vLLM
        # PIECEWISE graphs besides: the longer k alone wins (the day-zero table had k=3).
        assert "num_speculative_tokens_per_batch_size" not in engine
        assert engine["num_speculative_tokens"] > 3
        await eventually(
            lambda: any(
                e["reason"] == "Reconfigure" and code in e["message"] for e in _events(kmock)
            ),
            "an Event for the reconfiguration",
        )
        assert _sample("specops_reconfigurations_total") == reconfigured + 1
        assert _sample("specops_decisions_total", action="Reconfigure", reason=code) >= 1
        assert _sample("specops_mode", mode="Auto") == 1.0
        assert _sample("specops_mode", mode="Advise") == 0.0
        assert _sample("specops_speculative_tokens") == config["numSpeculativeTokens"]
        assert _sample("specops_predicted_gain_ratio") > 0.05

        # The new pods never become Ready (kmock has no Deployment controller).
        cluster.k = config["numSpeculativeTokens"]
        await eventually(lambda: _decision(kmock) == ("Withhold", "RolloutInProgress"), "follow")
        cluster.offset += 120  # past the 60 s rollout deadline
        await eventually(lambda: _sample("specops_rollbacks_total") == rollbacks + 1, "rollback")
        await eventually(
            lambda: _status(kmock)["speculativeConfig"]["numSpeculativeTokens"] == 3,
            "the last good config recorded",
        )
        status = _status(kmock)
        assert status["controller"].get("rollout") is None
        assert status["controller"]["cooldownUntil"]
        await eventually(
            lambda: (_engine_config(kmock) or {}).get("num_speculative_tokens") == 3,
            "Deployment back on the last good config",
        )
        await eventually(
            lambda: any(
                e["reason"] == "Rollback" and e["type"] == "Warning" for e in _events(kmock)
            ),
            "a warning Event for the rollback",
        )

        # During the cooldown the better config is withheld, not retried.
        cluster.k = 3
        await eventually(lambda: _decision(kmock) == ("Withhold", "Cooldown"), "cooldown")
        assert (_engine_config(kmock) or {}).get("num_speculative_tokens") == 3


async def test_stale_metrics_hold_the_config_and_say_so(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster, memo: Any
) -> None:
    cluster.status = EstimateStatus.STALE
    async with run_operator(kmock, tmp_path, monkeypatch, memo):
        async with kmock.post(SVC_PATH, json=_body()) as response:
            assert response.status in (200, 201)
        await eventually(lambda: _decision(kmock) == ("Withhold", "MetricsUnavailable"), "hold")
        fetched = cluster.fetches
        await eventually(lambda: cluster.fetches >= fetched + 1, "the hold on its saved state")
        fetched, applied = cluster.fetches, _applies(kmock)
        decided = _sample("specops_decisions_total", action="Withhold", reason="MetricsUnavailable")
        await eventually(lambda: cluster.fetches >= fetched + 3, "three more ticks")
        # The same hold on the same state writes nothing, and is still counted.
        assert _applies(kmock) == applied
        assert decided + 3 <= _sample(
            "specops_decisions_total", action="Withhold", reason="MetricsUnavailable"
        )
        status = _status(kmock)
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions["MetricsAvailable"]["status"] == "False"
        assert conditions["MetricsAvailable"]["reason"] == "MetricsStale"
        assert status["speculativeConfig"]["source"] == "Spec"
        assert (_engine_config(kmock) or {}).get("num_speculative_tokens") == 3
        # One Event for the hold, not one per tick.
        holds = [e for e in _events(kmock) if "MetricsUnavailable" in e.get("message", "")]
        assert len(holds) == 1


async def test_advise_publishes_the_recommendation_and_leaves_the_pods_alone(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster, memo: Any
) -> None:
    async with run_operator(kmock, tmp_path, monkeypatch, memo):
        async with kmock.post(SVC_PATH, json=_body("Advise")) as response:
            assert response.status in (200, 201)
        await eventually(lambda: _decision(kmock) == ("Withhold", "AdviseOnly"), "advice")
        status = _status(kmock)
        decision = status["lastDecision"]
        assert not decision["applied"]
        assert decision["recommended"]["numSpeculativeTokens"] > 3
        assert status["speculativeConfig"]["source"] == "Spec"
        assert status["speculativeConfig"]["numSpeculativeTokens"] == 3
        assert (_engine_config(kmock) or {}).get("num_speculative_tokens") == 3
        # The gauges are set once the status patch returns, a moment after kmock stores it.
        await eventually(lambda: _sample("specops_mode", mode="Advise") == 1.0, "the mode gauge")


async def test_a_source_that_needs_readings_is_sampled_between_decisions(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster
) -> None:
    """Prometheus gives one reading per query: the loop must take them at the scrape
    interval, or a decision window holds a single load sample."""
    cluster.interval = 0.05
    options = ControlLoopOptions(
        source=cluster, clock=cluster.now, period_s=30.0, initial_delay_s=0.0, rollout_poll_s=30.0
    )
    async with run_operator(kmock, tmp_path, monkeypatch, kopf.Memo(control=options)):
        async with kmock.post(SVC_PATH, json=_body("Advise")) as response:
            assert response.status in (200, 201)
        await eventually(lambda: _decision(kmock) is not None, "a first decision")
        fetched, sampled = cluster.fetches, cluster.samples
        await eventually(lambda: cluster.samples >= sampled + 5, "readings between decisions")
        assert cluster.fetches == fetched  # no decision is due for another 30 s


async def test_a_service_counts_from_zero_and_leaves_no_readings_or_series_when_deleted(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster, memo: Any
) -> None:
    async with run_operator(kmock, tmp_path, monkeypatch, memo):
        async with kmock.post(SVC_PATH, json=_body("Advise")) as response:
            assert response.status in (200, 201)
        await eventually(lambda: _sample("specops_mode", mode="Advise") == 1.0, "the mode gauge")
        labels = {"namespace": NS, "service": "llama"}
        # Exported at 0 before any event, so that increase() sees the first one.
        for counter in ("specops_reconfigurations_total", "specops_rollbacks_total"):
            assert REGISTRY.get_sample_value(counter, labels) == 0.0, counter
        async with kmock.delete(f"{SVC_PATH}/llama") as response:
            assert response.status in (200, 202)
        await eventually(lambda: (NS, "llama") in cluster.forgotten, "the readings dropped")
        assert REGISTRY.get_sample_value("specops_mode", {**labels, "mode": "Advise"}) is None
        assert REGISTRY.get_sample_value("specops_speculative_tokens", labels) is None
        assert REGISTRY.get_sample_value("specops_rollbacks_total", labels) is None


async def test_a_deleted_service_is_forgotten_only_once_its_status_apply_in_flight_returned(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster, memo: Any
) -> None:
    """kopf cancels a deleted service's loop at once. An apply the loop had on a thread must
    return before the loop forgets the service and kopf lets the object go: landing after,
    it wrote to a service already forgotten (and in the emulator, brought it back)."""
    order: list[str] = []
    hold, in_flight, forgotten = threading.Event(), threading.Event(), threading.Event()
    apply_status, forget = Kube.apply_status, cluster.forget

    def held_apply(
        kube: Kube, service: dict[str, Any], status: dict[str, Any], manager: str
    ) -> dict[str, Any]:
        if manager != Writer.CONTROLLER or not hold.is_set():
            return apply_status(kube, service, status, manager)
        hold.clear()
        in_flight.set()
        forgotten.wait(timeout=3)  # a loop that does not wait for the apply forgets meanwhile
        try:
            return apply_status(kube, service, status, manager)
        finally:
            order.append("applied")

    def forgetting(namespace: str, name: str) -> None:
        order.append("forgot")
        forgotten.set()
        forget(namespace, name)

    monkeypatch.setattr(Kube, "apply_status", held_apply)
    monkeypatch.setattr(cluster, "forget", forgetting)
    async with run_operator(kmock, tmp_path, monkeypatch, memo):
        async with kmock.post(SVC_PATH, json=_body("Advise")) as response:
            assert response.status in (200, 201)
        await eventually(lambda: _decision(kmock) is not None, "a first decision")
        hold.set()
        cluster.running = [3.0] * 40  # new measurements: the next decision applies them
        await eventually(in_flight.is_set, "a status apply in flight")
        async with kmock.delete(f"{SVC_PATH}/llama") as response:
            assert response.status in (200, 202)
        await eventually(lambda: "forgot" in order, "the loop ended")
        assert order == ["applied", "forgot"]


async def test_with_data_parallel_engines_the_loop_chooses_one_k(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster, memo: Any
) -> None:
    """vLLM ignores a per-batch-size table beyond data-parallel 1: the loop must not pick one."""
    body = _body()
    body["spec"]["engine"]["extraArgs"] = ["--data-parallel-size", "2"]
    async with run_operator(kmock, tmp_path, monkeypatch, memo):
        config = await _reconfigured(kmock, body)
        assert config["numSpeculativeTokens"] > 3 and not config.get("schedule")
        await eventually(
            lambda: (
                (_engine_config(kmock) or {}).get("num_speculative_tokens")
                == config["numSpeculativeTokens"]
            ),
            "Deployment re-rendered",
        )
        assert "num_speculative_tokens_per_batch_size" not in (_engine_config(kmock) or {})


def _status_managers(kmock: Any) -> dict[str, Any]:
    """Each manager's fields of status, from the object's managedFields."""
    managed = (live(kmock, SERVICE, "llama") or {}).get("metadata", {}).get("managedFields") or []
    return {
        m["manager"]: m["fieldsV1"].get("f:status", {})
        for m in managed
        if m.get("subresource") == "status"
    }


def _old_operators_status(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as an operator before the per-writer managers left it: its status (the spec's
    day-zero table, not yet measured) merge-patched as the one manager ``specops``."""
    spec = apply_defaults(parse_service(body).spec)
    config = speculative_config_status(spec, speculation_from_spec(spec), "Spec")
    stamp = "2026-01-01T00:00:00Z"
    conditions = [
        {"type": "Ready", "status": "False", "reason": "ReplicasNotReady", "message": ""},
        {"type": "MetricsAvailable", "status": "Unknown", "reason": "AwaitingController"},
    ]
    status: dict[str, Any] = {
        "observedGeneration": 1,
        "conditions": [{**c, "lastTransitionTime": stamp} for c in conditions],
        "speculativeConfig": config.model_dump(by_alias=True, exclude_none=True, mode="json"),
    }
    fields: dict[str, Any] = {f"f:{key}": {} for key in status if key != "conditions"}
    fields["f:speculativeConfig"] = {f"f:{key}": {} for key in status["speculativeConfig"]}
    fields["f:conditions"] = {
        f'k:{{"type":"{c["type"]}"}}': {".": {}, **{f"f:{key}": {} for key in c}}
        for c in status["conditions"]
    }
    entry = {
        "manager": "specops",
        "operation": "Update",
        "apiVersion": "specops.io/v1alpha1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": fields},
        "subresource": "status",
    }
    return {**body, "status": status, "metadata": {**body["metadata"], "managedFields": [entry]}}


async def test_each_writer_owns_its_status_fields_also_on_an_object_an_older_operator_wrote(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster, memo: Any
) -> None:
    """The reconciler and the control loop apply status under their own managers: each holds
    its conditions by type, neither the other's. What an older operator merge-patched is
    handed to them, so the day-zero table goes once the loop picks one k."""
    body = _old_operators_status(_body())
    assert body["status"]["speculativeConfig"]["schedule"]  # the example starts on a table
    async with run_operator(kmock, tmp_path, monkeypatch, memo):
        config = await _reconfigured(kmock, body)
        assert config["numSpeculativeTokens"] > 3 and "schedule" not in config
        mine = {
            f'k:{{"type":"{t}"}}' for t in ("Ready", "Progressing", "Degraded", "SpeculationActive")
        }

        def conditions_of(manager: str) -> set[str]:
            """The condition types ``manager`` holds ("." is the list itself, which a
            handed-over entry names and an applied one may not)."""
            held = _status_managers(kmock).get(manager, {})
            return set(held.get("f:conditions", {})) - {"."}

        # The reconciler records the loop's choice with the conditions it held (here the one
        # handed over), then applies its whole status: who holds what is read after that.
        await eventually(
            lambda: conditions_of("specops-reconciler") == mine, "the reconciler's status"
        )
        managers = _status_managers(kmock)
        assert set(managers) == {"specops-reconciler", "specops-controller"}
        reconciler, controller = managers["specops-reconciler"], managers["specops-controller"]
        assert conditions_of("specops-controller") == {'k:{"type":"MetricsAvailable"}'}
        assert "f:speculativeConfig" in reconciler and "f:speculativeConfig" not in controller
        assert {"f:controller", "f:lastDecision", "f:lastMeasurements"} <= set(controller)
        conditions = {c["type"]: c for c in _status(kmock)["conditions"]}
        assert set(conditions) == set(CONDITION_OWNERS)
        assert conditions["MetricsAvailable"]["status"] == "True"
        # Gone, the loop stops before the operator does (not in the middle of a short wait).
        async with kmock.delete(f"{SVC_PATH}/llama") as response:
            assert response.status in (200, 202)
        await eventually(lambda: (NS, "llama") in cluster.forgotten, "the loop stopped")


def _canary_body() -> dict[str, Any]:
    body = _body()
    body["spec"]["policy"]["canary"] = {"enabled": True, "windows": 2, "maxWindows": 4}
    return body


def _k_of(kmock: Any, name: str) -> int | None:
    deployment = live(kmock, DEPLOYMENT, name)
    if deployment is None:
        return None
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return int(json.loads(args[args.index("--speculative-config") + 1])["num_speculative_tokens"])


def _replicas(kmock: Any, name: str) -> int | None:
    deployment = live(kmock, DEPLOYMENT, name)
    return None if deployment is None else int(deployment["spec"]["replicas"])


async def _canary_started(kmock: Any, cluster: FakeCluster) -> int:
    """Create the service; once its canary runs on one pod of two, the canary's k."""
    async with kmock.post(SVC_PATH, json=_canary_body()) as response:
        assert response.status in (200, 201)
    await eventually(lambda: _decision(kmock) == ("Canary", "CanaryStarted"), "a canary")
    await eventually(lambda: live(kmock, DEPLOYMENT, "llama-canary") is not None, "its Deployment")
    status = _status(kmock)
    canary = status["controller"]["canary"]
    k = int(canary["speculativeConfig"]["numSpeculativeTokens"])
    assert k > 3 and canary["baseline"]["numSpeculativeTokens"] == 3
    assert status["lastDecision"]["canary"]["verdict"] == "Running"
    assert status["speculativeConfig"]["numSpeculativeTokens"] == 3  # the fleet stays
    deployment = live(kmock, DEPLOYMENT, "llama-canary")
    assert deployment is not None
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["specops.io/canary"] == "true" and labels["app.kubernetes.io/instance"] == "llama"
    assert deployment["spec"]["selector"]["matchLabels"]["specops.io/canary"] == "true"
    assert (_k_of(kmock, "llama-canary"), _replicas(kmock, "llama-canary")) == (k, 1)
    await eventually(lambda: _replicas(kmock, "llama") == 1, "the fleet gives up one pod")
    assert _k_of(kmock, "llama") == 3
    cluster.canary_k = k
    return k


async def test_a_canary_that_measures_faster_rolls_the_fleet(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster, memo: Any
) -> None:
    """With two replicas the change runs on one pod first; 25 % faster per output token on
    the same load over two windows, it goes to the whole fleet and the canary goes."""
    async with run_operator(kmock, tmp_path, monkeypatch, memo):
        k = await _canary_started(kmock, cluster)
        cluster.canary_tpot_s = 0.008  # the fleet's 10 ms over 8 ms: +25 %
        await eventually(lambda: _decision(kmock) == ("Reconfigure", "CanaryPassed"), "promoted")
        status = _status(kmock)
        result = status["lastDecision"]["canary"]
        assert result["verdict"] == "Promoted" and result["windows"] >= 2
        assert result["measuredGainPercent"] == pytest.approx(25.0)
        assert result["lowGainPercent"] == pytest.approx(25.0)
        await eventually(
            lambda: _sample("specops_canary_gain_ratio", quantity="measured") == 0.25,
            "the measured gain exported",
        )
        assert _sample("specops_canary_gain_ratio", quantity="predicted") > 0.05
        assert status["controller"].get("canary") is None
        await eventually(
            lambda: _status(kmock)["speculativeConfig"]["numSpeculativeTokens"] == k,
            "the canary's config recorded for the fleet",
        )
        await eventually(lambda: _k_of(kmock, "llama") == k, "the fleet re-rendered")
        await eventually(lambda: _replicas(kmock, "llama") == 2, "every replica back")
        await eventually(lambda: live(kmock, DEPLOYMENT, "llama-canary") is None, "canary gone")
        await eventually(
            lambda: any("llama-canary deleted" in e["message"] for e in _events(kmock)),
            "an Event for the canary's Deployment deleted",
        )
        messages = [e["message"] for e in _events(kmock)]
        assert any("CanaryStarted" in m for m in messages), messages
        assert any("CanaryPassed" in m and "+25.0%" in m for m in messages), messages


async def test_a_canary_that_measures_slower_is_rolled_back_with_a_warning(
    kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster, memo: Any
) -> None:
    async with run_operator(kmock, tmp_path, monkeypatch, memo):
        await _canary_started(kmock, cluster)
        cluster.canary_tpot_s = 0.0125  # 20 % slower per output token than the fleet
        await eventually(lambda: _decision(kmock) == ("Rollback", "CanaryFailed"), "rolled back")
        status = _status(kmock)
        result = status["lastDecision"]["canary"]
        assert result["verdict"] == "RolledBack"
        assert result["measuredGainPercent"] == pytest.approx(-20.0)
        assert status["speculativeConfig"]["numSpeculativeTokens"] == 3
        await eventually(lambda: live(kmock, DEPLOYMENT, "llama-canary") is None, "canary gone")
        await eventually(lambda: _replicas(kmock, "llama") == 2, "every replica back")
        assert _k_of(kmock, "llama") == 3
        await eventually(
            lambda: any(
                e["type"] == "Warning" and "CanaryFailed" in e["message"] for e in _events(kmock)
            ),
            "a warning Event for the canary",
        )
