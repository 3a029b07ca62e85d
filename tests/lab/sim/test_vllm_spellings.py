"""``specops sim serve`` reads its flags as ``vllm serve`` does: every spelling vLLM takes for
a flag (underscores, abbreviations, dotted JSON keys, a ``--config`` file) sets it here too,
so a flag the operator owns cannot be walked around in the simulated engine either."""

import json
from pathlib import Path

import click
import httpx
import pytest
from specops_lab.launch import (
    free_ports,
    spawn,
    specops_executable,
    stop_process,
    wait_until_answers,
)
from specops_lab.sim._cli import serve

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _params(*args: str) -> dict[str, object]:
    return serve.make_context("serve", list(args)).params


def test_underscores_and_abbreviations_set_the_flag() -> None:
    params = _params(MODEL, "--por=9001", "--served_model_nam", "alias", "--max_num_seqs=7")
    assert (params["port"], params["served_model_name"], params["max_num_seqs"]) == (
        9001,
        "alias",
        7,
    )
    assert params["extra"] == (MODEL,)


def test_dotted_keys_replace_the_speculative_config() -> None:
    given = json.dumps({"method": "eagle", "model": "d", "num_speculative_tokens": 3})
    params = _params(
        MODEL,
        "--speculative-config",
        given,
        "--speculative_config.num_speculative_tokens=2",
        "--speculative-config.method",
        "ngram",
    )
    assert isinstance(params["speculative_config"], str)
    assert json.loads(params["speculative_config"]) == {
        "num_speculative_tokens": 2,
        "method": "ngram",
    }


def test_a_config_file_sets_flags_the_command_line_overrides(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("port: 9100\nmax-num-seqs: 5\nspeculative-config:\n  method: ngram\n")
    params = _params("--config", str(config), "--model", MODEL, "--port", "9200")
    assert (params["port"], params["max_num_seqs"]) == (9200, 5)
    assert json.loads(str(params["speculative_config"])) == {"method": "ngram"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((MODEL, "--max-num=4"), "ambiguous option: --max-num could match"),
        ((MODEL, "--config", "flags.json"), "must be YAML"),
        ((MODEL, "--config"), "--config needs a file"),
    ],
)
def test_what_vllm_refuses_is_refused_with_its_reason(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(click.UsageError, match=message):
        _params(*args)


@pytest.mark.integration
def test_a_served_engine_follows_the_spellings(tmp_path: Path) -> None:
    """A real process: the port, the served name and the speculation come from spellings
    the old reader ignored."""
    (port,) = free_ports(1)
    argv: tuple[str, ...] = (specops_executable(), "sim", "serve", MODEL, "--hos=127.0.0.1")
    argv += (f"--por={port}",)
    argv += ("--served_model_name", "alias", "--speculative-config.method=ngram")
    argv += (
        "--speculative-config.num_speculative_tokens",
        "2",
        "--speculative-config.prompt_lookup_max=3",
    )
    process = spawn(argv, tmp_path / "engine.log", tie_to_parent=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_answers(f"{url}/health", process)
        models = httpx.get(f"{url}/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["alias"]
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        assert "vllm:spec_decode_num_drafts_total" in metrics
    finally:
        stop_process(process)
