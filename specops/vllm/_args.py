"""``vllm serve``'s command line, read as its argparse reads it.

vLLM's ``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``) turns underscores into
dashes in a flag's name up to its first dot, folds dotted keys
(``--speculative-config.num_speculative_tokens=8``) into that flag's JSON, loads
``--config FILE`` as more flags, and leaves argparse's prefix matching on, so ``--por=9000``
is ``--port``. :func:`flag_key` reads a flag's name that way, and :func:`sets_flag` and
:func:`flag_pattern` (the same test as an RE2 expression, for CEL) say whether an argument
would set one of a set of flags.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["flag_key", "flag_pattern", "flag_value", "sets_flag"]


def flag_key(token: str) -> str | None:
    """The long flag ``token`` names, as vLLM reads it (``--served_model_nam=x`` gives
    ``--served-model-nam``); None for a value or a short flag."""
    if not token.startswith("--") or token == "--":
        return None
    name = re.split(r"[=.]", token[2:], maxsplit=1)[0]
    return "--" + name.replace("_", "-")


def _short(flag: str) -> bool:
    return not flag.startswith("--")


def sets_flag(token: str, flags: Sequence[str]) -> str | None:
    """The flag of ``flags`` that ``token`` would set in vLLM, or None.

    A long flag matches when its name (dashes or underscores, up to a ``=`` or ``.``) is
    the flag or a prefix of it, as argparse resolves an abbreviation; a short one
    (``-tp``) when it stands alone or before ``=`` or a dotted key.
    """
    key = flag_key(token)
    for flag in flags:
        if _short(flag):
            if token == flag or token.startswith((flag + "=", flag + ".")):
                return flag
        elif key is not None and len(key) > 2 and flag.startswith(key):
            return flag
    return None


def _plain(flag: str) -> str:
    """``flag`` itself, checked to need no escaping in RE2 or in a CEL string."""
    if not re.fullmatch(r"--?[a-z0-9][a-z0-9-]*", flag):
        raise ValueError(f"{flag!r} is not a plain vLLM flag")
    return flag


def _prefixes(name: str) -> str:
    """RE2 for every non-empty prefix of ``name``, a dash standing for ``-`` or ``_``."""
    chars = ["[-_]" if c == "-" else c for c in name]
    pattern = ""
    for char in reversed(chars[1:]):
        pattern = f"(?:{char}{pattern})?"
    return chars[0] + pattern


def flag_pattern(flags: Sequence[str]) -> str:
    """RE2 that an argument matches exactly when :func:`sets_flag` finds one of ``flags``.

    Nothing after the name is read (``[=.]`` or the end), so a value holding a newline,
    which RE2's ``.`` would not cross, cannot hide the flag.
    """
    long = "|".join(_prefixes(_plain(f)[2:]) for f in flags if not _short(f))
    short = "|".join(_plain(f) for f in flags if _short(f))
    return f"^(?:--(?:{long})|{short})(?:[=.]|$)"


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
