"""extraArgs that would set a flag the operator owns, in every spelling vLLM 0.33.0 reads:
one table, checked by the Python twin and by the CEL rule the API server runs."""

from typing import Any

import celpy
import pytest

from specops.api import parse_spec
from specops.api._models import REFUSED_FLAGS
from specops.errors import SpecValidationError
from specops.vllm import flag_key, flag_pattern, sets_flag

from .test_validation import GOOD, _cel_failures, _defaulted, _schema, _with

# (argument, the flag vLLM would set with it, or None when it sets none of ours)
CASES: list[tuple[str, str | None]] = [
    ("--port=9000", "--port"),
    ("--port", "--port"),
    ("--speculative_config={}", "--speculative-config"),  # underscores are dashes
    ("--speculative-config.num_speculative_tokens=8", "--speculative-config"),  # dotted key
    ("--speculative_config.method", "--speculative-config"),
    ("--speculative-conf={}", "--speculative-config"),  # an abbreviation argparse resolves
    ("--por=9000", "--port"),
    ("--served-model-nam=x", "--served-model-name"),
    ("--served_model_nam=x", "--served-model-name"),
    ("--shutdown_timeout=0", "--shutdown-timeout"),
    ("--config=/etc/evil.yaml", "--config"),  # a file can set every flag
    ("--config", "--config"),
    ("--port=\n9000", "--port"),  # RE2's . stops at a newline: the value must not matter
    ("-tp", "-tp"),
    ("-tp=4", "-tp"),
    ("-sc.num_speculative_tokens=8", "-sc"),
    ("--enable-prefix-caching", None),
    ("--gpu-memory-utilization=0.9", None),
    ("--max-num-batched-tokens=8192", None),  # shares a start with --max-num-seqs only
    ("--model-impl=vllm", None),  # longer than --model: not an abbreviation of it
    ("--data-parallel-size=2", None),
    ("-O3", None),
    ("--tp=2", None),  # not a flag vLLM has; argparse refuses it on its own
    ("9000", None),
]


@pytest.mark.parametrize(("arg", "flag"), CASES, ids=[repr(c[0]) for c in CASES])
def test_python_and_cel_agree_on_what_vllm_would_read(arg: str, flag: str | None) -> None:
    assert sets_flag(arg, REFUSED_FLAGS) == flag
    env = celpy.Environment()
    program = env.program(env.compile(f"a.matches('{flag_pattern(REFUSED_FLAGS)}')"))
    assert bool(program.evaluate({"a": celpy.celtypes.StringType(arg)})) == (flag is not None)


@pytest.mark.parametrize("arg", [c[0] for c in CASES if c[1] is not None])
def test_the_spec_is_refused_by_both_checks_with_one_message(arg: str) -> None:
    spec: dict[str, Any] = _with("engine.extraArgs", ["--enable-prefix-caching", arg])
    message = "spec.engine.extraArgs must not carry flags the operator sets"
    with pytest.raises(SpecValidationError, match=message):
        parse_spec(spec)
    failures = _cel_failures(_schema(), _defaulted(_schema(), spec))
    assert any(f.startswith(message) for f in failures), failures


def test_flag_keys_are_read_as_vllm_reads_them() -> None:
    assert flag_key("--served_model_name=x") == "--served-model-name"
    assert flag_key("--speculative_config.method=eagle") == "--speculative-config"
    assert flag_key("-tp") is None and flag_key("value") is None and flag_key("--") is None
    assert parse_spec(GOOD).engine.extra_args == []
