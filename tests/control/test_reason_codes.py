"""Every decision carries one fixed reason code; the same situations as in the words.

Cost model and acceptance as in test_decide: at batch 4 with n-gram, k=1 beats k=3 by
15.6 %, which pays for a 30 s restart over a 600 s regime.
"""

from dataclasses import replace

import pytest

from specops.control import (
    Action,
    ControlInput,
    ControllerState,
    ControlSettings,
    Mode,
    ReasonCode,
    Rollout,
    ServiceModel,
    decide,
)
from specops.policy import BatchDistribution, DraftCost, SpecConfig, StepCostModel, cost_prior

COST = StepCostModel(t_fixed=0.010, c_tok=0.001, c_kv=0.0, t_overhead=0.0, draft=DraftCost())
ONE_K = ServiceModel(
    method="suffix", cost=cost_prior(COST, relative_stddev=1e-3, floor_fraction=1e-3), max_batch=64
)
SETTINGS = ControlSettings(
    k_max=3, restart_cost_s=30.0, min_dwell_s=300.0, min_drafts=1000, confidence_z=0.0
)
K3 = ControllerState.initial(SpecConfig.static(3))
K1 = ControllerState.initial(SpecConfig.static(1))


def _window(end: float = 0.0, samples: int = 60, drafts: float = 10_000.0) -> ControlInput:
    return ControlInput(
        window_end=end,
        load=BatchDistribution.from_samples([4] * samples),
        context_tokens=0,
        num_drafts=drafts,
        accepted_per_position=tuple(drafts * 0.5 ** (i + 1) for i in range(3)),
        window_s=60.0,
    )


@pytest.mark.parametrize(
    ("state", "observation", "settings", "action", "code"),
    [
        (K3, _window(), SETTINGS, Action.RECONFIGURE, ReasonCode.GAIN_PAYS_RESTART),
        (K1, _window(), SETTINGS, Action.KEEP, ReasonCode.ALREADY_BEST),
        (K3, _window(), replace(SETTINGS, min_gain=0.5), Action.KEEP, ReasonCode.GAIN_TOO_SMALL),
        (
            K3,
            _window(),
            replace(SETTINGS, restart_cost_s=100.0),
            Action.KEEP,
            ReasonCode.RESTART_NOT_WORTH,
        ),
        (K3, _window(), replace(SETTINGS, mode=Mode.FIXED), Action.KEEP, ReasonCode.MODE_FROZEN),
        (
            K3,
            _window(),
            replace(SETTINGS, mode=Mode.ADVISE),
            Action.WITHHOLD,
            ReasonCode.ADVISE_ONLY,
        ),
        (K3, _window(end=-1000.0), SETTINGS, Action.WITHHOLD, ReasonCode.METRICS_STALE),
        (K3, _window(samples=3), SETTINGS, Action.WITHHOLD, ReasonCode.TOO_LITTLE_LOAD),
        (
            replace(K3, last_change_at=-100.0),
            _window(),
            SETTINGS,
            Action.WITHHOLD,
            ReasonCode.MIN_DWELL,
        ),
        (
            replace(K3, cooldown_until=500.0),
            _window(),
            SETTINGS,
            Action.WITHHOLD,
            ReasonCode.COOLDOWN,
        ),
        (
            replace(K3, changes=(-3000.0,)),
            _window(),
            replace(SETTINGS, max_reconfigurations_per_hour=1),
            Action.WITHHOLD,
            ReasonCode.HOURLY_CAP,
        ),
    ],
)
def test_each_outcome_has_its_code(
    state: ControllerState,
    observation: ControlInput,
    settings: ControlSettings,
    action: Action,
    code: ReasonCode,
) -> None:
    decision = decide(state, observation, ONE_K, settings, 0.0)
    assert (decision.action, decision.code) == (action, code), decision.reason


def test_a_rollout_is_followed_then_rolled_back_with_codes() -> None:
    rollout = Rollout(target=SpecConfig.static(1), previous=SpecConfig.static(3), started_at=0.0)
    state = replace(K3, config=SpecConfig.static(1), rollout=rollout)
    waiting = replace(_window(), pods_ready=False)
    assert decide(state, waiting, ONE_K, SETTINGS, 60.0).code is ReasonCode.ROLLOUT_IN_PROGRESS
    failed = decide(state, waiting, ONE_K, SETTINGS, SETTINGS.rollout_timeout_s + 1)
    assert (failed.action, failed.code) == (Action.ROLLBACK, ReasonCode.ROLLOUT_FAILED)
    done = decide(state, _window(), ONE_K, SETTINGS, 60.0)
    assert (done.action, done.code) == (Action.KEEP, ReasonCode.ROLLOUT_DONE)


def test_a_table_is_chosen_only_where_the_user_allows_one() -> None:
    eagle = ServiceModel(
        method="eagle3",
        cost=cost_prior(COST, relative_stddev=1e-3, floor_fraction=1e-3),
        max_batch=64,
    )
    spread = ControlInput(
        window_end=0.0,
        load=BatchDistribution.from_samples([1] * 50 + [7] * 10),
        context_tokens=0,
        num_drafts=10_000.0,
        accepted_per_position=tuple(10_000.0 * 0.5 ** (i + 1) for i in range(3)),
        window_s=60.0,
    )
    table = decide(K3, spread, eagle, SETTINGS, 0.0)
    assert table.recommended is not None and table.recommended.per_batch_size
    one_k = decide(K3, spread, replace(eagle, per_batch_size=False), SETTINGS, 0.0)
    assert one_k.recommended is not None and not one_k.recommended.per_batch_size
    assert one_k.recommended.num_speculative_tokens > 0
