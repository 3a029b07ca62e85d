"""Parse SpeculativeService objects, turning pydantic's errors into one clear message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from specops.api._models import SpeculativeService, SpeculativeServiceSpec
from specops.errors import SpecValidationError

__all__ = ["describe_errors", "parse_service", "parse_spec"]

_VALUE_ERROR_PREFIX = "Value error, "


def describe_errors(exc: ValidationError, prefix: str) -> str:
    """One line per problem: the field's path and what is wrong (rules name their own path)."""
    lines = []
    for error in exc.errors():
        message = error["msg"]
        if message.startswith(_VALUE_ERROR_PREFIX):
            lines.extend(message.removeprefix(_VALUE_ERROR_PREFIX).splitlines())
            continue
        path = ".".join(part for part in (prefix, *map(str, error["loc"])) if part)
        lines.append(f"{path}: {message}")
    return "\n".join(lines)


def parse_spec(data: Mapping[str, Any]) -> SpeculativeServiceSpec:
    """Validate a ``spec`` mapping exactly as the API server would."""
    try:
        return SpeculativeServiceSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecValidationError(describe_errors(exc, "spec")) from exc


def parse_service(data: Mapping[str, Any]) -> SpeculativeService:
    """Validate a whole SpeculativeService object (a manifest, or one read from the cluster)."""
    if data.get("kind") != "SpeculativeService":
        raise SpecValidationError(f"kind must be SpeculativeService, got {data.get('kind')!r}")
    try:
        return SpeculativeService.model_validate(data)
    except ValidationError as exc:
        raise SpecValidationError(describe_errors(exc, "")) from exc
