"""The controller's state through status and back, and the pure helpers of the loop's shell."""

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from specops_operator._control import (
    control_settings,
    decision_status,
    deployment_ready,
    plan_tick,
)
from specops_operator._fetch import Fetched
from specops_operator._state import restore_state, save_state
from specops_operator._status import rollout_complete

from specops.api import ControllerStatus, SpeculativeConfigStatus, parse_service
from specops.control import (
    Action,
    Canary,
    ControlInput,
    ControllerState,
    ControlSettings,
    Mode,
    PastRegime,
    Regime,
    Rollout,
    ServiceModel,
    decide,
)
from specops.policy import (
    AcceptanceCurve,
    BatchDistribution,
    CostEvidence,
    DraftCost,
    ObjectiveKind,
    SpecConfig,
    StepCostModel,
    StepPoint,
    cost_prior,
)
from specops.render import (
    RenderOptions,
    apply_defaults,
    performance_profile,
    plan,
    spec_config,
    speculation_from_spec,
    speculative_config_status,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama.yaml"
TABLE = SpecConfig.table([[1, 16, 5], [17, 64, 3], [65, 256, 0]], cap=5)


def _full_state() -> ControllerState:
    load = BatchDistribution.from_weights({1: 1.0, 2: 1.0, 3: 1.0, 40: 2.0}, samples=50)
    return ControllerState(
        config=TABLE,
        last_good=SpecConfig.static(3),
        rollout=Rollout(target=TABLE, previous=SpecConfig.static(3), started_at=1_700_000_100.5),
        changes=(1_699_999_000.0, 1_700_000_100.5),
        last_change_at=1_700_000_100.5,
        rollout_durations=(95.0, 130.25),
        cooldown_until=1_700_003_600.0,
        regime=Regime(
            load=load,
            acceptance=AcceptanceCurve((0.8, 0.6, 0.45)),
            started_at=1_699_998_000.0,
            drafts=120_000.0,
            windows=7,
            doubted_since=1_700_000_000.0,
            doubts=1,
            drift=-1,
            context_tokens=1375.5,
        ),
        acceptance=AcceptanceCurve((0.8, 0.61, 0.44)),
        acceptance_drafts=30_000.0,
        cost_evidence=CostEvidence().add(
            [
                StepPoint(128.0, 90_000.0, 3.0, 96.0, 1.0, 0.012, 150.0, 1_700_000_040.0),
                StepPoint(40.0, 30_000.0, 0.0, 0.0, 0.0, 0.008, 240.0, 1_700_000_050.25),
            ],
            cost_prior(StepCostModel(0.006, 2e-5, 4e-8, 1e-3, DraftCost(2e-3, 8e-7))),
        ),
        regime_lengths=(1800.0, 640.5),
        past_regimes=(
            PastRegime(BatchDistribution.from_weights({6: 0.5, 8: 0.5}), 2100.0),
            PastRegime(BatchDistribution.from_weights({190: 0.25, 192: 0.75}), 950.25),
        ),
        canary=Canary(SpecConfig.static(5), TABLE, 1_700_000_200.0, 0.125, (1.2, 1.25)),
    )


def _any(_: SpecConfig) -> bool:
    return True


def test_the_state_survives_status_and_json() -> None:
    state = _full_state()
    saved = save_state(state)
    wire = saved.model_dump(by_alias=True, mode="json")
    restored = restore_state(ControllerStatus.model_validate(wire), TABLE, _any)
    assert restored.regime is not None and state.regime is not None
    assert dict(restored.regime.load.weights) == pytest.approx(dict(state.regime.load.weights))
    assert restored.regime.load.samples == 50
    assert replace(restored.regime, load=state.regime.load) == state.regime
    assert restored == ControllerState(**{**vars(state), "regime": restored.regime})
    # equal-weight neighbours are stored as one run
    assert [(w["minBatchSize"], w["maxBatchSize"]) for w in wire["regime"]["load"]] == [
        (1, 3),
        (40, 40),
    ]


def test_evidence_saved_for_other_step_time_terms_is_dropped() -> None:
    # An older operator saved 8 terms without naming them: its rows are not these terms.
    wire = save_state(_full_state()).model_dump(by_alias=True, mode="json")
    assert wire["stepTimeEvidence"]["terms"][-1] == "table"
    old = wire["stepTimeEvidence"]
    wire["stepTimeEvidence"] = {
        **{k: v for k, v in old.items() if k != "terms"},
        "gram": old["gram"][:64],
        "moment": old["moment"][:8],
    }
    restored = restore_state(ControllerStatus.model_validate(wire), TABLE, _any)
    assert restored.cost_evidence == CostEvidence()
    assert restored.acceptance == _full_state().acceptance
    # Named terms but a moment of the wrong length (a hand-edited status) is dropped too.
    wire["stepTimeEvidence"] = {**old, "moment": old["moment"][:8]}
    restored = restore_state(ControllerStatus.model_validate(wire), TABLE, _any)
    assert restored.cost_evidence == CostEvidence()


def test_a_state_for_another_config_restarts_from_the_spec_config() -> None:
    state = _full_state()
    restored = restore_state(save_state(state), SpecConfig.static(2), _any)
    assert restored.config == restored.last_good == SpecConfig.static(2)
    assert restored.rollout is None
    assert restored.changes == state.changes  # the hourly cap still counts them
    assert restored.acceptance == state.acceptance
    assert restore_state(None, SpecConfig.off(), _any) == ControllerState.initial(SpecConfig.off())


def test_the_config_in_force_is_read_from_status() -> None:
    schedule = [
        {"minBatchSize": 1, "maxBatchSize": 64, "numSpeculativeTokens": 3},
        {"minBatchSize": 65, "maxBatchSize": 256, "numSpeculativeTokens": 0},
    ]
    on = SpeculativeConfigStatus.model_validate(
        {"enabled": True, "numSpeculativeTokens": 3, "schedule": schedule}
    )
    assert spec_config(on) == SpecConfig.table([[1, 64, 3], [65, 256, 0]], cap=3)
    assert spec_config(SpeculativeConfigStatus(enabled=False)) == SpecConfig.off()


def _service(**policy: object) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    body["spec"]["policy"].update(policy)
    return body


def test_settings_and_profile_come_from_the_spec() -> None:
    spec = apply_defaults(
        parse_service(_service(objective="Goodput", tpotTargetMilliseconds=40)).spec
    )
    settings = control_settings(spec)
    assert settings.mode is Mode.AUTO
    assert settings.objective.kind is ObjectiveKind.GOODPUT
    assert settings.objective.tpot_target_s == pytest.approx(0.04)
    assert (settings.k_min, settings.k_max, settings.min_gain) == (1, 5, 0.05)
    assert (settings.restart_cost_s, settings.rollout_timeout_s) == (300.0, 1800.0)
    assert settings.margin == ControlSettings().margin == 1.5
    patient = parse_service(_service(restartMargin=3)).spec
    assert control_settings(apply_defaults(patient)).margin == 3.0
    profile = performance_profile(spec)
    assert profile is not None and profile.name == "llama3.1-8b-h100"
    chosen = parse_service(_service(performanceProfile="llama3.1-8b-h200")).spec
    assert performance_profile(chosen).name == "llama3.1-8b-h200"  # type: ignore[union-attr]
    unknown = copy.deepcopy(_service())
    unknown["spec"]["model"] = "acme/unknown-7b"
    assert performance_profile(parse_service(unknown).spec) is None


def test_the_deployment_is_ready_only_when_every_pod_runs_the_desired_template() -> None:
    service = parse_service({**_service(), "metadata": {"name": "llama", "namespace": "ml"}})
    desired = next(o for o in plan(service, RenderOptions()).objects if o["kind"] == "Deployment")
    live = copy.deepcopy(desired)
    live["metadata"]["generation"] = 3
    live["status"] = {
        "observedGeneration": 3,
        "replicas": 2,
        "updatedReplicas": 2,
        "readyReplicas": 2,
    }
    assert deployment_ready(live, desired)
    surging = copy.deepcopy(live)
    surging["status"]["replicas"] = 3  # an old pod still runs
    assert not deployment_ready(surging, desired)
    old = copy.deepcopy(live)
    old["metadata"]["annotations"] = {"specops.io/render-hash": "0000"}
    assert not deployment_ready(old, desired)
    assert not deployment_ready(None, desired)


def test_the_decision_in_status_names_action_code_gain_and_crossovers() -> None:
    spec = apply_defaults(parse_service(_service()).spec)
    cost = StepCostModel(t_fixed=0.010, c_tok=0.001, c_kv=0.0, t_overhead=0.0, draft=DraftCost())
    observation = ControlInput(
        window_end=0.0,
        load=BatchDistribution.from_samples([4] * 60),
        context_tokens=0,
        num_drafts=10_000.0,
        accepted_per_position=tuple(10_000.0 * 0.5 ** (i + 1) for i in range(3)),
        window_s=60.0,
    )
    settings = ControlSettings(k_max=3, restart_cost_s=30.0, min_drafts=1000, confidence_z=0.0)
    decision = decide(
        ControllerState.initial(SpecConfig.static(3)),
        observation,
        ServiceModel(
            "suffix", cost_prior(cost, relative_stddev=1e-3, floor_fraction=1e-3), max_batch=64
        ),
        settings,
        0.0,
    )
    assert decision.action is Action.RECONFIGURE
    assert decision.predicted_gain is not None
    status = decision_status(spec, decision)
    assert status["action"] == "Reconfigure"
    assert status["reasonCode"] == "GainPaysRestart"
    assert status["predictedGainPercent"] == pytest.approx(decision.predicted_gain * 100, abs=1e-3)
    assert [c["k"] for c in status["crossovers"]] == [1, 2, 3]
    assert status["recommended"]["numSpeculativeTokens"] == 1
    assert status["recommended"]["source"] == "Controller"
    assert status["time"] == "1970-01-01T00:00:00+00:00"


def test_the_deployment_and_the_status_share_the_rollout_rule() -> None:
    rolled = {"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "replicas": 2}}
    rolled["status"] |= {"updatedReplicas": 2, "readyReplicas": 2}
    assert rollout_complete(rolled, 2)
    assert not rollout_complete(rolled, 3)
    behind = copy.deepcopy(rolled)
    behind["metadata"]["generation"] = 3  # the Deployment controller has not seen the edit
    assert not rollout_complete(behind, 2)
    unready = copy.deepcopy(rolled)
    unready["status"]["readyReplicas"] = 1
    assert not rollout_complete(unready, 2)


def test_a_tick_without_measurements_withholds_and_reports_it() -> None:
    body = {**_service(), "metadata": {"name": "llama", "namespace": "ml"}}
    service = parse_service(body)
    spec = apply_defaults(service.spec)
    config = speculative_config_status(spec, speculation_from_spec(spec), "Spec")
    body["status"] = {"speculativeConfig": config.model_dump(by_alias=True, mode="json")}
    service = parse_service(body)
    assert service.status is not None
    tick = plan_tick(
        body,
        service.status,
        speculation_from_spec(spec),
        spec,
        Fetched((), ("llama-0: cannot reach it",)),
        pods_ready=True,
        now=1_700_000_000.0,
        default_context_tokens=1024.0,
    )
    assert tick.decision.action is Action.WITHHOLD
    assert tick.choice is None and "speculativeConfig" not in tick.status
    assert tick.status["lastMeasurements"] is None  # none measured, none kept from before
    (metrics,) = tick.status["conditions"]
    assert (metrics["type"], metrics["status"]) == ("MetricsAvailable", "False")
    assert tick.status["lastDecision"]["reasonCode"] == "MetricsUnavailable"
    assert tick.event is not None and tick.event[:2] == ("Normal", "Withhold")


def test_a_repeated_decision_posts_once_and_a_new_recommendation_posts_again() -> None:
    body = {**_service(), "metadata": {"name": "llama", "namespace": "ml"}}
    spec = apply_defaults(parse_service(body).spec)
    in_force = speculation_from_spec(spec)
    spec_status = speculative_config_status(spec, in_force, "Spec")
    config = spec_status.model_dump(by_alias=True, mode="json")
    blind = Fetched((), ("llama-0: cannot reach it",))

    def tick(status: dict[str, Any]) -> Any:
        body["status"] = status
        parsed = parse_service(body).status
        assert parsed is not None
        return plan_tick(body, parsed, in_force, spec, blind, True, 1_700_000_000.0, 1024.0)

    first = tick({"speculativeConfig": config})
    assert first.event is not None
    again = tick({"speculativeConfig": config, "lastDecision": first.status["lastDecision"]})
    assert again.event is None  # the same action, reason and recommendation: no new event
    other = speculative_config_status(spec, SpecConfig.static(5), "Controller")
    earlier = {**first.status["lastDecision"], "recommended": other.model_dump(by_alias=True)}
    moved = tick({"speculativeConfig": config, "lastDecision": earlier})
    assert moved.event is not None and moved.event[1] == "Withhold"


def test_a_saved_state_outside_the_spec_starts_over_from_the_config_in_force() -> None:
    state = _full_state()  # last_good k=3, a rollout from k=3 to TABLE (cap 5)
    only_small = lambda config: config.num_speculative_tokens <= 3  # noqa: E731
    restored = restore_state(save_state(state), TABLE, only_small)
    assert restored.config == restored.last_good == TABLE and restored.rollout is None
    assert restored.acceptance == state.acceptance  # what was measured stays


def test_a_saved_state_that_does_not_parse_starts_over() -> None:
    wire = save_state(_full_state()).model_dump(by_alias=True, mode="json")
    wire["lastGood"]["schedule"] = [
        {"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 9}  # beyond its cap 3
    ]
    restored = restore_state(ControllerStatus.model_validate(wire), TABLE, _any)
    assert restored == ControllerState.initial(TABLE)
