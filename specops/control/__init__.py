"""The slow control loop's decision core: pure, clock injected, no Kubernetes types."""

from specops.control._decide import (
    Action,
    ControllerState,
    ControlSettings,
    Decision,
    Mode,
    Observation,
    Rollout,
    ServiceModel,
    decide,
)
from specops.control._regime import Regime, RegimeSettings, track_regime

__all__ = [
    "Action",
    "ControlSettings",
    "ControllerState",
    "Decision",
    "Mode",
    "Observation",
    "Regime",
    "RegimeSettings",
    "Rollout",
    "ServiceModel",
    "decide",
    "track_regime",
]
