"""Everything the operator would create for one SpeculativeService, from the object alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specops.api import SpeculativeService, SpeculativeServiceSpec
from specops.policy import SpecConfig
from specops.render._defaults import apply_defaults
from specops.render._objects import RenderOptions, Selector, render_objects, selector_labels
from specops.render._speculation import (
    canary_in_force,
    controller_choice,
    speculation_from_spec,
)

__all__ = ["Plan", "plan"]


@dataclass(frozen=True)
class Plan:
    """The defaulted spec, the speculation chosen for it (and by whom), the rendered children."""

    spec: SpeculativeServiceSpec
    speculation: SpecConfig
    source: Literal["Spec", "Controller"]
    objects: tuple[dict[str, Any], ...]
    selector: dict[str, str]
    """The labels every child selects the service's pods with."""
    refused: str | None = None
    """Why the controller's choice recorded in status was not used (a hand edit), if so."""
    canary: SpecConfig | None = None
    """The config of the canary the controller runs beside the rest, if one runs."""


def plan(
    service: SpeculativeService, options: RenderOptions, selector: Selector | None = None
) -> Plan:
    """Apply defaults, pick the speculation in force (status first, else spec) and the
    canary's (status.controller), render.

    ``selector`` is the live Deployment's, which cannot change: a Deployment made before the
    owner's uid was among the selector labels keeps selecting without it, and its children
    render as they did (no rollout on upgrade; delete the Deployment to move it to the new
    selector). None for a service without one: :func:`selector_labels` with the uid.
    """
    spec = apply_defaults(service.spec)
    status_config = service.status.speculative_config if service.status else None
    chosen, refused = controller_choice(spec, status_config)
    speculation = chosen if chosen is not None else speculation_from_spec(spec)
    source: Literal["Spec", "Controller"] = "Controller" if chosen is not None else "Spec"
    name, namespace = service.metadata.name, service.metadata.namespace
    chosen_selector = dict(selector or selector_labels(name, service.metadata.uid))
    canary = canary_in_force(spec, service.status)
    objects = render_objects(name, namespace, spec, speculation, options, chosen_selector, canary)
    return Plan(spec, speculation, source, tuple(objects), chosen_selector, refused, canary)
