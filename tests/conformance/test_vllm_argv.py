"""Our reading of ``vllm serve``'s arguments beside vLLM's own parser, run from the wheel.

``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``) is executed from the pinned
wheel's source with a stand-in logger. Each case is parsed twice over the same flags: by
vLLM's parser, and by a plain argparse parser that knows no abbreviation, after
``vllm_argv`` and ``full_flag``. The two must agree on every value, so the simulated engine
(which reads its arguments with these functions) sets a flag exactly when vLLM would.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from specops.vllm import config_file_args, full_flag, vllm_argv, wheel_source

# The sim's vLLM flags, each taking a value.
FLAGS = (
    "--model",
    "--served-model-name",
    "--host",
    "--port",
    "--tensor-parallel-size",
    "--max-num-seqs",
    "--max-model-len",
    "--max-num-batched-tokens",
    "--speculative-config",
)
CONFIG = {
    "port": 9100,
    "served-model-name": "from-config",
    "speculative-config": {"method": "ngram", "num_speculative_tokens": 2},
}
CASES: tuple[tuple[str, ...], ...] = (
    ("m", "--port", "9000"),
    ("m", "--port=9000", "--served_model_name=x"),
    ("m", "--por=9000", "--served-model-nam", "x"),
    ("m", "--max_num_seqs=7", "--max-model-len", "2048"),
    ("m", "--speculative_config", '{"method": "eagle", "num_speculative_tokens": 3}'),
    ("m", "--speculative-config.num_speculative_tokens=8", "--speculative-config.method=ngram"),
    ("m", "--speculative_config.num_speculative_tokens", "4", "--speculative-config.model", "d"),
    ("m", "--speculative-config", '{"method": "eagle"}', "--speculative-config.model=d"),
    ("m", "--speculative-conf.num_speculative_tokens=2"),
    ("m", "--speculative-config.method=ngram", "--speculative-conf.num_speculative_tokens=2"),
    ("--model=m", "--port", "1"),
    ("m", "--speculative-config.stop+", "a,b", "--speculative-config.stop+=c"),
    ("m", "--max-model-len.x=80g", "--speculative-config.n=1K"),
    ("m", "--config", "CONFIG", "--port", "9001"),
    ("--config", "CONFIG", "--model", "m"),
    ("m", "--port", "9000", "--port=9002"),
)


@pytest.fixture(scope="module")
def flexible(vllm_wheel: Path) -> type[argparse.ArgumentParser]:
    """vLLM's FlexibleArgumentParser, built from the wheel's source."""
    source = wheel_source(vllm_wheel, "vllm/utils/argparse_utils.py")
    logger = types.ModuleType("vllm.logger")
    logger.init_logger = logging.getLogger  # type: ignore[attr-defined]
    stand_ins = {"regex": re, "vllm": types.ModuleType("vllm"), "vllm.logger": logger}
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        namespace: dict[str, Any] = {"__name__": "vllm_argparse_utils"}
        exec(compile(source, "vllm/utils/argparse_utils.py", "exec"), namespace)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    parser_class: type[argparse.ArgumentParser] = namespace["FlexibleArgumentParser"]
    return parser_class


@pytest.fixture
def config_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    yield path


def _parser(
    cls: type[argparse.ArgumentParser], *first: str, **kwargs: Any
) -> argparse.ArgumentParser:
    """A parser of the flags above; ``first``: positionals before the model (``serve``)."""
    parser = cls(prog="vllm serve", **kwargs)
    for name in first:
        parser.add_argument(name)
    parser.add_argument("model_tag", nargs="?")
    for flag in FLAGS:
        parser.add_argument(flag)
    return parser


def _read(path: str) -> Mapping[str, object]:
    loaded = yaml.safe_load(Path(path).read_text())
    assert isinstance(loaded, dict)
    return loaded


def _values(namespace: argparse.Namespace) -> dict[str, object]:
    """Each flag's value, JSON values compared parsed (key order aside)."""
    values = dict(vars(namespace))
    for key, value in values.items():
        if isinstance(value, str) and value.startswith("{"):
            values[key] = json.loads(value)
    return values


@pytest.mark.parametrize("case", CASES, ids=" ".join)
def test_our_reading_sets_what_vllms_parser_sets(
    case: tuple[str, ...], flexible: type[argparse.ArgumentParser], config_file: Path
) -> None:
    args = [str(config_file) if arg == "CONFIG" else arg for arg in case]
    theirs = _parser(flexible, "subcommand").parse_args(["serve", *args])
    read = [full_flag(arg, FLAGS) for arg in vllm_argv(args, _read)]
    ours = _parser(argparse.ArgumentParser, allow_abbrev=False).parse_args(read)
    assert _values(ours) == {
        key: value for key, value in _values(theirs).items() if key in vars(ours)
    }


def test_an_ambiguous_abbreviation_is_refused_as_vllm_refuses_it(
    flexible: type[argparse.ArgumentParser],
) -> None:
    with pytest.raises(SystemExit):
        _parser(flexible, "subcommand").parse_args(["serve", "m", "--max-num=4"])
    with pytest.raises(ValueError, match="ambiguous option: --max-num could match"):
        full_flag("--max-num=4", FLAGS)


def test_a_config_file_reads_as_vllms_does(
    flexible: type[argparse.ArgumentParser], tmp_path: Path
) -> None:
    config = {**CONFIG, "enforce-eager": True, "disable-log-stats": False, "x": [1, 2]}
    path = tmp_path / "flags.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    loaded: list[str] = flexible().load_config_file(str(path))  # type: ignore[attr-defined]
    assert config_file_args(config) == loaded
