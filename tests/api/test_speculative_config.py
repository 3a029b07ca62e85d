"""The --speculative-config model against vLLM 0.33.0's own rules and names."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path
from typing import get_args

import pytest

from specops.errors import SpecValidationError
from specops.vllm import (
    DEPRECATED_MTP_METHODS,
    SPECULATION_METHODS,
    SpeculativeConfig,
    VllmMethod,
    table_applies,
)


def test_round_trip_is_compact_and_sorted() -> None:
    config = SpeculativeConfig(
        method="eagle3",
        model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        num_speculative_tokens=3,
        num_speculative_tokens_per_batch_size=((65, 128, 1), (1, 64, 3)),
    )
    text = config.to_json()
    assert " " not in text
    assert '"num_speculative_tokens_per_batch_size":[[1,64,3],[65,128,1]]' in text
    assert SpeculativeConfig.from_json(text) == config


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"method":"eagle","num_speculative_tokens":3}', "without speculative model"),
        ('{"method":"ngram","num_speculative_tokens":0}', "greater than 0"),
        ('{"method":"ngram","prompt_lookup_min":5,"prompt_lookup_max":2}', "must be <="),
        ('{"method":"ngram","num_speculative_tokens_per_batch_size":[[2,8,3]]}', "start at 1"),
        (
            '{"method":"ngram","num_speculative_tokens_per_batch_size":[[1,8,3],[8,9,1]]}',
            "non-overlapping",
        ),
        ('{"method":"ngram","num_speculative_tokens_per_batch_size":[[1,8,-1]]}', ">= 0"),
        ('{"method":"ngram","tensor_parallel_size":2}', "Extra inputs"),
        ('{"method":"medusa"}', "method"),
        ("[1]", "JSON object"),
        ("{", "not valid JSON"),
    ],
)
def test_vllm_rules(text: str, message: str) -> None:
    with pytest.raises(SpecValidationError, match=message):
        SpeculativeConfig.from_json(text)


def test_hyphenated_keys_and_deprecated_mtp_names_are_accepted() -> None:
    config = SpeculativeConfig.from_json('{"method":"deepseek_mtp","num-speculative-tokens":1}')
    assert (config.canonical_method, config.num_speculative_tokens) == ("mtp", 1)
    assert SpeculativeConfig(model="org/draft").canonical_method == "draft_model"


def _wheel_literal(wheel_path: Path, name: str) -> set[str]:
    with zipfile.ZipFile(wheel_path) as wheel:
        tree = ast.parse(wheel.read("vllm/config/speculative.py"))
    literals: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
            target = node.targets[0]
            if isinstance(target, ast.Name):
                values: set[str] = set()
                for item in ast.walk(node.value.slice):
                    if isinstance(item, ast.Constant) and isinstance(item.value, str):
                        values.add(item.value)
                    elif isinstance(item, ast.Name):
                        values |= literals.get(item.id, set())
                literals[target.id] = values
    return literals[name]


def test_method_names_match_the_wheel(vllm_wheel: Path) -> None:
    assert set(get_args(VllmMethod)) == _wheel_literal(vllm_wheel, "SpeculativeMethod")
    assert _wheel_literal(vllm_wheel, "MTPModelTypes") - {"mtp"} == DEPRECATED_MTP_METHODS
    assert set(SPECULATION_METHODS) <= _wheel_literal(vllm_wheel, "SpeculativeMethod")


def test_the_table_applies_to_the_methods_vllm_honours_it_for_at_data_parallel_1() -> None:
    # vllm/config/vllm.py, _maybe_disable_dynamic_sd_for_v1, in the pinned wheel
    for method in ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"):
        assert table_applies(method)
    assert not table_applies("suffix")
    assert not table_applies("eagle3", data_parallel=2)
