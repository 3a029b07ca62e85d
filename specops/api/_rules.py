"""Cross-field rules written once, enforced twice: as CEL at the API server, in Python here.

Each :class:`Rule` carries a CEL expression for the CRD's ``x-kubernetes-validations`` and
the same predicate in Python, with one message that names the field and the fix. A model
lists its rules in ``__rules__``; :class:`CrdModel` checks them after field validation and
publishes them in its JSON schema, so the API server and the operator reject the same specs
with the same words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, model_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

__all__ = ["CrdModel", "Rule"]


@dataclass(frozen=True)
class Rule:
    """One cross-field constraint: ``cel`` and ``holds`` must agree on every object."""

    cel: str
    message: str
    holds: Callable[[Any], bool]
    field_path: str | None = None

    def to_crd(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry of this rule."""
        entry = {"rule": self.cel, "message": self.message}
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        return entry


class CrdModel(BaseModel):
    """Base of the API's models: camelCase on the wire, immutable, unknown keys refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    __rules__: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> CrdModel:
        broken = [rule.message for rule in self.__rules__ if not rule.holds(self)]
        if broken:
            raise ValueError("\n".join(broken))
        return self

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        if cls.__rules__:
            target = handler.resolve_ref_schema(schema)
            target["x-kubernetes-validations"] = [rule.to_crd() for rule in cls.__rules__]
        return schema
