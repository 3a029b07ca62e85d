"""Defaults that depend on other fields, applied before rendering (never inside it)."""

from __future__ import annotations

from specops.api import SpeculativeServiceSpec

__all__ = ["apply_defaults"]


def apply_defaults(spec: SpeculativeServiceSpec) -> SpeculativeServiceSpec:
    """A copy of the spec with derived defaults filled in: servedModelName falls back to model."""
    if spec.served_model_name is not None:
        return spec
    return spec.model_copy(update={"served_model_name": spec.model})
