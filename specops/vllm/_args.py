"""``vllm serve``'s command line, read as its argparse reads it.

vLLM's ``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``) turns underscores into
dashes in a flag's name up to its first dot, folds dotted keys
(``--speculative-config.num_speculative_tokens=8``) into that flag's JSON, loads
``--config FILE`` as more flags, and leaves argparse's prefix matching on, so ``--por=9000``
is ``--port``. :func:`flag_key` reads a flag's name that way, and :func:`sets_flag` and
:func:`flag_pattern` (the same test as an RE2 expression, for CEL) say whether an argument
would set one of a set of flags. :func:`vllm_argv` and :func:`full_flag` rewrite a command
line into the plain one argparse ends up reading, so the simulated engine sets a flag exactly
when vLLM would (a conformance test runs vLLM's parser from the wheel beside them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "MAX_NUM_SEQS_DEFAULT",
    "config_file_args",
    "flag_key",
    "flag_pattern",
    "flag_value",
    "full_flag",
    "sets_flag",
    "vllm_argv",
]

# The --max-num-seqs specops runs the engine with when a spec sets none (vLLM's own default
# varies with the GPU), and so the batch the sidecar's predictions reach unless told.
MAX_NUM_SEQS_DEFAULT = 256

# A config file's mapping, read from the path ``--config`` names.
ReadConfig = Callable[[str], Mapping[str, object]]
_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_SUFFIXES = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


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


def config_file_args(config: Mapping[str, object]) -> list[str]:
    """The flags a ``--config`` YAML mapping stands for, as vLLM's ``load_config_file`` makes
    them: ``key: value`` is ``--key value``, ``true`` the bare flag, a list the flag and each
    item, a mapping the flag and its JSON; ``false`` sets nothing (no flag we read has a
    ``--no-`` form)."""
    args: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            args += [f"--{key}"] if value else []
        elif isinstance(value, list):
            args += [f"--{key}", *(str(item) for item in value)] if value else []
        elif isinstance(value, dict):
            args += [f"--{key}", json.dumps(value)]
        else:
            args += [f"--{key}", str(value)]
    return args


def vllm_argv(args: Sequence[str], read_config: ReadConfig) -> list[str]:
    """The arguments after ``vllm serve`` as ``FlexibleArgumentParser`` hands them to argparse.

    A ``--model M`` becomes the positional model (vLLM's deprecated spelling of it); a
    ``--config FILE`` is replaced by the file's flags, placed after the positional model
    and before the other flags, so that the command line wins; each long flag's name has its
    underscores turned into dashes up to the first dot; and dotted keys
    (``--speculative-config.num_speculative_tokens 8``, ``key+`` for a list) are folded into
    one JSON value per flag, appended last, so it replaces any JSON given for that flag.
    Raises ValueError for a ``--config`` without a file or a second one.
    """
    argv = _model_first(list(args))
    if "--config" in argv:
        argv = _pull_config(argv, read_config)
    return _fold_dotted([_dashed(arg) for arg in argv])


def full_flag(token: str, flags: Sequence[str]) -> str:
    """``token`` with an abbreviated long flag written out in full, as argparse resolves one
    among ``flags``; a token that abbreviates none is returned as it is.

    Raises ValueError, in argparse's words, when it abbreviates more than one.
    """
    if not token.startswith("--") or token == "--":
        return token
    name, equals, value = token.partition("=")
    if name in flags:
        return token
    matches = [flag for flag in flags if flag.startswith(name)]
    if len(matches) > 1:
        raise ValueError(f"ambiguous option: {name} could match {', '.join(matches)}")
    return matches[0] + equals + value if matches else token


def _model_first(args: list[str]) -> list[str]:
    """The first ``--model M`` (or ``--model=M``) moved to the front as the positional model."""
    for i, arg in enumerate(args):
        if arg == "--model" and i + 1 < len(args):
            return [args[i + 1], *args[:i], *args[i + 2 :]]
        if arg.startswith("--model="):
            return [arg.removeprefix("--model="), *args[:i], *args[i + 1 :]]
    return args


def _pull_config(args: list[str], read_config: ReadConfig) -> list[str]:
    if args.count("--config") > 1:
        raise ValueError("--config is given more than once; vLLM reads one config file")
    index = args.index("--config")
    if index == len(args) - 1:
        raise ValueError("--config needs a file: --config FILE.yaml")
    config = config_file_args(read_config(args[index + 1]))
    rest = args[:index] + args[index + 2 :]
    if rest and not rest[0].startswith("-"):  # the positional model stays first
        return [rest[0], *config, *rest[1:]]
    return [*config, *rest]


def _dashed(arg: str) -> str:
    """``arg`` with its flag's name as :func:`flag_key` reads it (the rest as it is)."""
    key = flag_key(arg)
    return arg if key is None else key + arg[len(key) :]


def _fold_dotted(args: list[str]) -> list[str]:
    kept: list[str] = []
    folded: dict[str, dict[str, object]] = {}
    tokens = iter(args)
    for arg in tokens:
        key, equals, given = arg.partition("=")
        if not (arg.startswith("-") and "." in key):
            kept.append(arg)
            continue
        text = given if equals else next(tokens, "")
        if key.endswith("+"):
            key, text = key[:-1], json.dumps(text.split(","))
        flag, *path = key.split(".")
        nested: object = _dotted_value(text)
        for part in reversed(path):
            nested = {part: nested}
        assert isinstance(nested, dict)
        _merge(folded.setdefault(flag, {}), nested)
    for flag, value in folded.items():
        kept += [flag, json.dumps(value)]
    return kept


def _dotted_value(text: str) -> object:
    """A dotted key's value: JSON, else a human-readable integer (``80g``, ``1K``), else text."""
    try:
        value: object = json.loads(text)
    except ValueError:
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text.strip())
        if match is None:
            return text
        number, suffix = match.groups()
        if suffix in _SUFFIXES:
            return int(float(number) * _SUFFIXES[suffix])
        return int(number) * _BINARY_SUFFIXES[suffix] if number.isdigit() else text
    return value


def _merge(into: dict[str, object], update: Mapping[str, object]) -> None:
    """vLLM's recursive update: mappings merge, lists extend, anything else replaces."""
    for key, value in update.items():
        below = into.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            _merge(below, value)
        elif isinstance(value, list) and isinstance(below, list):
            below += value
        else:
            into[key] = value
