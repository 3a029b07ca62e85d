"""The sidecar's command line: which step-cost prior it predicts with."""

from __future__ import annotations

import click
import pytest
from specops_sidecar._cli import _cost_model

from specops.profiles import find_profile, get_profile


def test_a_named_profile_a_derived_prior_or_none() -> None:
    assert _cost_model("llama3.1-8b-h100", None, None, 1, "eagle3") == get_profile(
        "llama3.1-8b-h100"
    ).cost_model("eagle3")
    derived = find_profile(None, model="Qwen/Qwen3-32B", tensor_parallel_size=2, gpu="L40S")
    assert derived is not None
    assert _cost_model(None, "Qwen/Qwen3-32B", "L40S", 2, "ngram") == derived.cost_model("ngram")
    assert _cost_model(None, "Qwen/Qwen3-32B", None, 1, "eagle3") is None
    with pytest.raises(click.UsageError, match="no performance profile for model 'org/x'"):
        _cost_model(None, "org/x", "B200", 1, "eagle3")
