"""kopf's record of the spec last handled (its "diff base"), built without copying what it
discards, and written only by the replica that holds the service when sharded."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

import kopf

from specops_operator._leases import ShardKeeper

__all__ = ["HeldDiffBase", "LeanDiffBase"]

# What the essence keeps of metadata (kopf picks labels and annotations; the storage's key
# reads the kind and the owner references).
_KEPT_METADATA = ("labels", "annotations", "ownerReferences")


def _top(field: str | Iterable[str]) -> str:
    """The top-level key of a kopf field spec ("status.x" or ("status", "x"))."""
    return field.split(".", 1)[0] if isinstance(field, str) else next(iter(field), "")


class LeanDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation storage, whose essence is built from what it keeps.

    kopf builds an essence for every watch event of every watched kind: it deep-copies the
    whole body (``managedFields`` and ``status`` included), then deletes metadata and status.
    For a fleet's pods and Deployments that copy was half of the operator's CPU. The essence
    here is the same (the spec and other top-level fields, labels, annotations, and any extra
    field a handler asked for), from a body that holds nothing else."""

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[Any] | None = None,
    ) -> kopf.BodyEssence:
        fields = list(extra_fields or ())
        asked = {_top(f) for f in fields}
        lean: dict[str, Any] = {
            key: value
            for key, value in body.items()
            if key not in ("metadata", "status") or key in asked
        }
        if "metadata" not in asked:
            meta: Mapping[str, Any] = body.get("metadata") or {}
            lean["metadata"] = {key: meta[key] for key in _KEPT_METADATA if key in meta}
        return super().build(body=kopf.Body(cast(kopf.RawBody, lean)), extra_fields=fields)


class HeldDiffBase(LeanDiffBase):
    """Written only by the replica that holds the service: another replica's write would
    make the holder's kopf see the edit as handled (its events batched) before the holder
    rendered it."""

    def __init__(self, keeper: ShardKeeper) -> None:
        super().__init__()
        self._keeper = keeper

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if self._keeper.holds(body.metadata.uid or ""):
            super().store(body=body, patch=patch, essence=essence)
