"""The specops operator: kopf handlers around the pure renderers of specops.render."""

from specops_operator._kube import FIELD_MANAGER, Kube, KubeApiError
from specops_operator._reconcile import ChildWrite, Outcome, covers, reconcile
from specops_operator._shards import shard_of
from specops_operator._status import desired_status, rollout_complete

__all__ = [
    "FIELD_MANAGER",
    "ChildWrite",
    "Kube",
    "KubeApiError",
    "Outcome",
    "covers",
    "desired_status",
    "reconcile",
    "rollout_complete",
    "shard_of",
]
