"""Each manifest in examples/ parses, renders, and shows what it is there to show.

The golden files hold every example's full render; these tests name, for each example, the
property a reader copies it for, so that an edit that loses it fails here by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specops.api import SpeculativeService, parse_service
from specops.policy import SpecConfig
from specops.profiles import PROFILES
from specops.render import RenderOptions, performance_profile, plan, speculative_config_status
from tests.chart.test_container_argv import dry_parse

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Obj = dict[str, Any]


def _doc(name: str) -> Obj:
    doc: Obj = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def _objects(name: str, *, pod_monitor: bool = False) -> dict[str, Obj]:
    """The example's rendered children by kind, as ``specops render -f`` prints them."""
    objects = plan(parse_service(_doc(name)), RenderOptions(pod_monitor=pod_monitor)).objects
    return {o["kind"]: o for o in objects}


def _containers(name: str) -> dict[str, Obj]:
    pod = _objects(name)["Deployment"]["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}


def _flag(args: list[str], flag: str) -> str:
    assert flag in args, (flag, args)
    return args[args.index(flag) + 1]


def _speculative_config(name: str) -> Obj:
    """The --speculative-config vLLM starts with, as JSON."""
    config: Obj = json.loads(_flag(_containers(name)["vllm"]["args"], "--speculative-config"))
    return config


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_renders_a_sidecar_that_parses(path: Path) -> None:
    sidecar = _containers(path.name)["specops-sidecar"]
    ctx = dry_parse([*sidecar["command"], *sidecar["args"]])
    assert ctx.info_name == "sidecar"


def test_ngram_drafts_from_the_prompt_with_no_draft_model() -> None:
    service = parse_service(_doc("ngram.yaml"))
    assert service.spec.speculation.draft_model is None
    assert _speculative_config("ngram.yaml") == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }


def test_the_70b_runs_tensor_parallel_on_four_gpus_with_a_draft_model() -> None:
    containers = _containers("llama-70b-tp4.yaml")
    engine, sidecar = containers["vllm"], containers["specops-sidecar"]
    assert _flag(engine["args"], "--tensor-parallel-size") == "4"
    assert engine["resources"]["requests"]["nvidia.com/gpu"] == "4"
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert _speculative_config("llama-70b-tp4.yaml") == {
        "method": "draft_model",
        "model": "meta-llama/Llama-3.2-1B-Instruct",
        "num_speculative_tokens": 4,
        "draft_tensor_parallel_size": 4,
    }
    assert _flag(sidecar["args"], "--profile") == "llama3.1-70b-h100-tp4"


def test_deepseek_drafts_with_its_mtp_layer_from_a_prior_derived_for_the_gpu() -> None:
    spec = parse_service(_doc("deepseek-v3-mtp.yaml")).spec
    assert _speculative_config("deepseek-v3-mtp.yaml") == {
        "method": "mtp",
        "num_speculative_tokens": 1,
    }
    profile = performance_profile(spec)
    assert profile is not None, "no step-time prior for DeepSeek-V3 on H200s"
    assert profile.name not in PROFILES, "derived from the model's shape, not a catalog profile"
    assert (profile.model, profile.tensor_parallel_size) == ("deepseek-ai/DeepSeek-V3", 8)
    containers = _containers("deepseek-v3-mtp.yaml")
    assert containers["vllm"]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # The sidecar derives the same prior from what it was derived from.
    sidecar = containers["specops-sidecar"]["args"]
    assert _flag(sidecar, "--model") == "deepseek-ai/DeepSeek-V3"
    assert _flag(sidecar, "--gpu") == "H200-SXM-141GB"


def test_advise_keeps_the_specs_start_whatever_the_controller_recorded() -> None:
    doc = _doc("advise.yaml")
    service = parse_service(doc)
    assert service.spec.speculation.mode == "Advise"
    start = plan(service, RenderOptions())
    assert (start.speculation, start.source) == (SpecConfig(3), "Spec")
    # A recommendation written to status, as mode Auto would apply it, is not rendered.
    choice = speculative_config_status(start.spec, SpecConfig(1), "Controller")
    recorded = SpeculativeService.model_validate(
        {**doc, "status": {"speculativeConfig": choice.model_dump(by_alias=True, mode="json")}}
    )
    advised = plan(recorded, RenderOptions())
    assert (advised.speculation, advised.source) == (SpecConfig(3), "Spec")
    assert advised.objects == start.objects


def test_the_prometheus_source_reaches_the_sidecar_and_the_pods_get_a_pod_monitor() -> None:
    spec = parse_service(_doc("prometheus.yaml")).spec
    assert spec.metrics.source == "Prometheus"
    url = "http://prometheus-operated.monitoring:9090"
    sidecar = _containers("prometheus.yaml")["specops-sidecar"]
    assert _flag(sidecar["args"], "--prometheus-url") == url
    objects = _objects("prometheus.yaml", pod_monitor=True)
    monitor = objects["PodMonitor"]["spec"]
    pod_labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= pod_labels.items()
    assert {e["port"] for e in monitor["podMetricsEndpoints"]} == {"http", "metrics"}
    assert {e["interval"] for e in monitor["podMetricsEndpoints"]} == {"15s"}


def test_goodput_names_its_tpot_target() -> None:
    policy = parse_service(_doc("goodput.yaml")).spec.policy
    assert (policy.objective, policy.tpot_target_milliseconds) == ("Goodput", 30.0)
