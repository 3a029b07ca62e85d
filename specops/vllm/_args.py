"""``vllm serve``'s command line, read as its argparse reads it."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["flag_value"]


def flag_value(tokens: Sequence[str], *flags: str) -> str | None:
    """The last value given for any of ``flags`` (``--flag v`` or ``--flag=v``), as argparse
    keeps; None when none is given, and "" for a flag with nothing after it, which argparse
    would refuse."""
    value: str | None = None
    for i, token in enumerate(tokens):
        name, equals, given = token.partition("=")
        if name in flags:
            value = given if equals else (tokens[i + 1] if i + 1 < len(tokens) else "")
    return value
