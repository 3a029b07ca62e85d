"""The objects the operator owns as its watches last delivered them, or as its own writes
returned them: reconciliations read their children and their service here, not from the API
server, so a fleet's steady resyncs cost no reads.

A miss proves nothing (a watch not caught up yet; a foreign object under a child's name,
which carries none of the operator's labels and is never watched): the caller reads the API
server then, and keeps what it read. A write's answer is kept at once, so the operator always
reads at least what it wrote itself; a watch event older than what is held is dropped."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

__all__ = [
    "CACHED_KINDS",
    "MANAGED_BY",
    "OWNED_SELECTOR",
    "SERVICE_LABEL",
    "OwnedPods",
    "WatchCache",
]

MANAGED_BY = "app.kubernetes.io/managed-by"
SERVICE_LABEL = "specops.io/service"
# Labels every child the operator has made carries (specops.render.child_labels, since the
# first release). The watches of owned kinds ask the API server for these only: a cluster's
# other Deployments, Services and pods then never reach the operator, not even to be
# filtered out.
OWNED_SELECTOR = f"{MANAGED_BY}=specops,{SERVICE_LABEL}"

Obj = dict[str, Any]
_Key = tuple[str, str, str, str]

# (apiVersion, kind) of what the operator watches and so can serve from memory.
CACHED_KINDS = frozenset(
    {
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("policy/v1", "PodDisruptionBudget"),
        ("specops.io/v1alpha1", "SpeculativeService"),
    }
)


def _key(obj: Mapping[str, Any]) -> _Key:
    meta = obj.get("metadata") or {}
    return (obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace", ""), meta["name"])


def _version(obj: Mapping[str, Any]) -> int | None:
    """The object's resourceVersion as a number (etcd's revision), None when it is not one."""
    value = (obj.get("metadata") or {}).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _newer(new: Mapping[str, Any], held: Mapping[str, Any] | None) -> bool:
    if held is None:
        return True
    new_version, held_version = _version(new), _version(held)
    return new_version is None or held_version is None or new_version >= held_version


class WatchCache:
    """Owned objects by (apiVersion, kind, namespace, name); shared by the executor's threads."""

    def __init__(self, kinds: frozenset[tuple[str, str]] = CACHED_KINDS) -> None:
        self._kinds = kinds
        self._objects: dict[_Key, Obj] = {}
        self._lock = threading.Lock()

    def watched(self, obj: Mapping[str, Any]) -> bool:
        """Whether the operator's watches deliver ``obj``'s changes: a SpeculativeService, or a
        child of a cached kind carrying the labels the watches select (so a foreign object
        under a child's name, which no watch would update or drop, is never held)."""
        if (obj.get("apiVersion", ""), obj.get("kind", "")) not in self._kinds:
            return False
        if obj.get("kind") == "SpeculativeService":
            return True
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return labels.get(MANAGED_BY) == "specops" and SERVICE_LABEL in labels

    def keep(self, obj: Mapping[str, Any]) -> None:
        """What a watch delivered or a write returned, unless something newer is held."""
        if not self.watched(obj):
            return
        kept = copy.deepcopy(dict(obj))
        key = _key(obj)
        with self._lock:
            if _newer(kept, self._objects.get(key)):
                self._objects[key] = kept

    def drop(self, obj: Mapping[str, Any]) -> None:
        """Deleted (a watch's DELETED event, or the operator's own delete)."""
        with self._lock:
            self._objects.pop(_key(obj), None)

    def get(self, ref: Mapping[str, Any]) -> Obj | None:
        """A copy of what is held for ``ref`` (kind, namespace, name), None on a miss."""
        with self._lock:
            held = self._objects.get(_key(ref))
        return copy.deepcopy(held) if held is not None else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)


class OwnedPods:
    """The pods of each service as their watch last delivered them, reduced to what the
    control loop reads, by (namespace, service).

    Not a kopf index: kopf holds every handler back until its indices are filled, and the
    way it tracks that costs time quadratic in the objects it watches, so a restart under a
    fleet of thousands of pods would take minutes before its first reconciliation. The
    control loop's first decision comes long after the watch's first listing anyway."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], dict[str, Obj]] = {}
        self._lock = threading.Lock()

    def keep(self, namespace: str, service: str, name: str, view: Obj) -> None:
        with self._lock:
            self._pods.setdefault((namespace, service), {})[name] = view

    def drop(self, namespace: str, service: str, name: str) -> None:
        with self._lock:
            pods = self._pods.get((namespace, service))
            if pods is not None:
                pods.pop(name, None)
                if not pods:
                    del self._pods[(namespace, service)]

    def of(self, namespace: str, service: str) -> list[Obj]:
        """The service's pods (views as kept: the caller reads, never writes them)."""
        with self._lock:
            return list(self._pods.get((namespace, service), {}).values())
