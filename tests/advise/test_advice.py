"""The advice's pure core on observations built from a few numbers."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from specops.advise import AdviceInput, advice_text, advise, speculation_given
from specops.control import service_model
from specops.errors import SpecValidationError
from specops.policy import SpecConfig
from specops.profiles import get_profile
from tests.chart.test_container_argv import dry_parse
from tests.control.observations import pod_observation

NOW = 1000.0
SERVICE = service_model(get_profile("llama3.1-8b-h100"), "eagle3", max_batch=256)
GIVEN = (
    '{"method": "eagle3", "model": "org/draft", "num_speculative_tokens": 3, '
    '"disable_padded_drafter_batch": true}'
)


def _inputs(given: str | None = None) -> AdviceInput:
    raw = speculation_given(given)[0] if given else None
    return AdviceInput(
        target="prom", window_s=300.0, method="eagle3", service=SERVICE, given_config=raw
    )


def test_a_given_config_keeps_the_keys_specops_does_not_choose() -> None:
    raw, config, method = speculation_given(GIVEN)
    assert config == SpecConfig.static(3) and method == "eagle3"
    assert raw["disable_padded_drafter_batch"] is True
    table = speculation_given(
        '{"method": "eagle3", "model": "d", "num_speculative_tokens": 3, '
        '"num_speculative_tokens_per_batch_size": [[1, 16, 3], [17, 512, 0]]}'
    )[1]
    assert table == SpecConfig.table([[1, 16, 3], [17, 512, 0]], cap=3)
    with pytest.raises(SpecValidationError, match="not valid JSON"):
        speculation_given("{")


def test_speculation_off_at_low_load_is_advised_on_with_the_users_keys() -> None:
    observation = pod_observation(None, at=NOW, running=[1] * 30, k=0)
    advice = advise(observation, _inputs(GIVEN.replace('"num_speculative_tokens": 3, ', "")), NOW)
    assert not advice.in_force.speculating and advice.acceptance_per_position == []
    assert "published acceptance is the prior" in advice.acceptance_source
    recommendation = advice.recommendation
    assert recommendation is not None and recommendation.change
    assert recommendation.verdict == "AdviseOnly" and recommendation.predicted_gain > 0.5
    assert recommendation.speculative_config is not None
    run = json.loads(recommendation.speculative_config)
    assert run["model"] == "org/draft" and run["disable_padded_drafter_batch"] is True
    assert run["num_speculative_tokens"] == recommendation.num_speculative_tokens > 0
    text = advice_text(advice)
    assert "In force (from the engines' counters): speculation off" in text
    assert f"Recommended: --speculative-config '{recommendation.speculative_config}'" in text


def test_a_change_unlikely_to_pay_is_reported_beside_the_config_to_keep() -> None:
    observation = pod_observation(None, at=NOW, running=[1] * 30, k=3, alpha=0.8)
    advice = advise(observation, _inputs(GIVEN), NOW, SpecConfig.static(3))
    assert advice.acceptance_per_position == pytest.approx([0.8, 0.64, 0.512])
    recommendation = advice.recommendation
    assert recommendation is not None and not recommendation.change
    assert recommendation.num_speculative_tokens == 3
    assert recommendation.choice_num_speculative_tokens > 3
    assert recommendation.likely_gain is not None
    assert recommendation.likely_gain < recommendation.predicted_gain
    assert "Recommended: keep what runs" in advice_text(advice)


def test_a_config_the_counters_contradict_is_refused() -> None:
    observation = pod_observation(None, at=NOW, running=[8] * 30, k=3)
    with pytest.raises(SpecValidationError, match="the engines count 3 draft positions"):
        advise(observation, _inputs(), NOW, SpecConfig.static(5))


def test_without_load_there_is_no_recommendation_and_the_reason_says_why() -> None:
    observation = pod_observation(None, at=NOW, running=[0] * 30, k=3)
    advice = advise(observation, _inputs(), NOW)
    assert advice.recommendation is None
    assert "busy load samples" in advice.reason
    assert f"No recommendation: {advice.reason}" in advice_text(advice)


@pytest.mark.parametrize("flag", ["--max-num-seqs", "--max-batch"])
def test_the_batch_limit_is_named_as_vllm_names_it_or_by_its_older_name(flag: str) -> None:
    argv = ["specops", "advise", "--prometheus-url", "http://prom:9090", "--match", "pod=p-0"]
    ctx = dry_parse([*argv, flag, "512"])
    assert ctx.params["max_batch"] == 512


def test_the_context_is_measured_against_the_engines_pool_and_says_so() -> None:
    """An engine's KV pool comes from its cache_config_info; without it the profile's is
    read, and without a usage the --context-tokens assumption stands, each said so."""
    engine = pod_observation(None, at=NOW, running=[8] * 30, k=3, kv_usage=0.4, kv_pool=8e5)
    advice = advise(engine, _inputs(GIVEN), NOW)
    assert advice.context_tokens == pytest.approx(0.4 * 8e5 / 8)
    assert advice.context_source.endswith("of the engines' pools")
    assert "Context: 40000 tokens a running request, measured" in advice_text(advice)
    profiled = pod_observation(None, at=NOW, running=[8] * 30, k=3, kv_usage=0.4)
    inputs = replace(_inputs(GIVEN), kv_capacity_tokens=400_000, default_context_tokens=700.0)
    advice = advise(profiled, inputs, NOW)
    assert advice.context_tokens == pytest.approx(0.4 * 400_000 / 8)
    assert "profile's pool for 1 of 1 pods" in advice.context_source
    unmeasured = pod_observation(None, at=NOW, running=[8] * 30, k=3)
    advice = advise(unmeasured, inputs, NOW)
    assert advice.context_tokens == 700.0 and advice.context_source.startswith("assumed")
