"""The slow control loop's decision core: pure, clock injected, no Kubernetes types."""

from specops.control._adapter import ServiceWindow, batch_distribution, service_window
from specops.control._canary import Canary, CanaryReport, CanaryVerdict
from specops.control._decide import (
    Action,
    ControlInput,
    ControllerState,
    ControlSettings,
    CrossoverBand,
    Decision,
    Mode,
    ReasonCode,
    Rollout,
    ServiceModel,
    decide,
    expected_remaining,
)
from specops.control._regime import PastRegime, Regime, RegimeSettings, track_regime
from specops.control._service import service_model

__all__ = [
    "Action",
    "Canary",
    "CanaryReport",
    "CanaryVerdict",
    "ControlInput",
    "ControlSettings",
    "ControllerState",
    "CrossoverBand",
    "Decision",
    "Mode",
    "PastRegime",
    "ReasonCode",
    "Regime",
    "RegimeSettings",
    "Rollout",
    "ServiceModel",
    "ServiceWindow",
    "batch_distribution",
    "decide",
    "expected_remaining",
    "service_model",
    "service_window",
    "track_regime",
]
