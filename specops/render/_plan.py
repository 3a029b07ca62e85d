"""Everything the operator would create for one SpeculativeService, from the object alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specops.api import SpeculativeService, SpeculativeServiceSpec
from specops.policy import SpecConfig
from specops.render._defaults import apply_defaults
from specops.render._objects import RenderOptions, render_objects
from specops.render._speculation import controller_choice_applies, speculation_in_force

__all__ = ["Plan", "plan"]


@dataclass(frozen=True)
class Plan:
    """The defaulted spec, the speculation chosen for it (and by whom), the rendered children."""

    spec: SpeculativeServiceSpec
    speculation: SpecConfig
    source: Literal["Spec", "Controller"]
    objects: tuple[dict[str, Any], ...]


def plan(service: SpeculativeService, options: RenderOptions) -> Plan:
    """Apply defaults, pick the speculation in force (status first, else spec), render."""
    spec = apply_defaults(service.spec)
    status_config = service.status.speculative_config if service.status else None
    speculation = speculation_in_force(spec, status_config)
    source: Literal["Spec", "Controller"] = (
        "Controller" if controller_choice_applies(spec, status_config) else "Spec"
    )
    name, namespace = service.metadata.name, service.metadata.namespace
    objects = render_objects(name, namespace, spec, speculation, options)
    return Plan(spec=spec, speculation=speculation, source=source, objects=tuple(objects))
