"""The simulated engine against the pinned vLLM wheel, read as source (DESIGN section 5)."""

import ast
import re
from pathlib import Path
from typing import get_args

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from specops_lab.sim import EngineConfig, SimulatedEngine, Workload, load_workload
from specops_lab.sim import parse_speculative_config as parse
from specops_lab.sim._exposition import CONTENT_TYPE, render_metrics
from specops_lab.sim._metrics import EngineMetrics

from specops.observation import Counter, Gauge, Hist
from specops.vllm import (
    ENGINE_METRICS,
    FINISH_REASONS,
    RELEASE_METRICS,
    SpeculativeConfig,
    VllmMethod,
    bucket_bounds,
    release_bucket_families,
    release_finish_reasons,
    release_label_values,
    release_metrics,
    release_speculative_keys,
    release_speculative_methods,
    wheel_source,
)
from specops.vllm._metrics import request_tokens_buckets


@pytest.fixture(scope="module")
def wheel(vllm_wheel: Path) -> Path:
    return vllm_wheel


def _engine_metrics(speculative: bool) -> EngineMetrics:
    spec = '{"method": "eagle3", "model": "d", "num_speculative_tokens": 2}'
    engine = SimulatedEngine(
        Workload(load_workload("gsm8k")),
        EngineConfig(speculative=parse(spec) if speculative else None),
    )
    for _ in range(4):
        engine.add_request()
    engine.run_until(30.0)
    return engine.metrics()


def _registered(family: Metric) -> str:
    """The name vLLM registers a parsed family under: prometheus-client drops a counter's
    _total from the family name (vllm:estimated_flops_per_gpu_total)."""
    release_name = f"{family.name}_total"
    return release_name if release_name in RELEASE_METRICS else family.name


def _exported_page(speculative: bool = True) -> dict[str, tuple[str, list[dict[str, str]]]]:
    """Families on the simulated engine's /metrics: registered name to (type, label sets)."""
    page = render_metrics(_engine_metrics(speculative), "m", speculative=speculative).decode()
    return {
        _registered(family): (
            family.type,
            [{k: v for k, v in s.labels.items() if k != "le"} for s in family.samples],
        )
        for family in text_string_to_metric_families(page)
    }


def test_every_exported_metric_exists_in_the_release_with_its_type_labels_and_buckets(
    wheel: Path,
) -> None:
    release = release_metrics(wheel)
    families = release_bucket_families(wheel)
    label_values = release_label_values(wheel)
    for name, spec in RELEASE_METRICS.items():
        assert name in release, f"{name} is not registered by vLLM's stat loggers"
        ours = release[name]
        assert (ours.kind, ours.labels) == (spec.kind, spec.labels), name
        assert ours.bucket_family == spec.buckets, name
        if spec.buckets in families:
            assert bucket_bounds(spec.buckets, 4096) == families[spec.buckets], name
        assert spec.label_values == label_values.get(name, ()), name


def test_the_simulator_exports_every_metric_vllm_always_registers(wheel: Path) -> None:
    release = release_metrics(wheel)
    always = {name for name, metric in release.items() if metric.always}
    speculative = {name for name in release if name.startswith("vllm:spec_decode_")}
    assert set(RELEASE_METRICS) == always | speculative
    assert set(_exported_page(speculative=False)) == always
    assert set(_exported_page(speculative=True)) == always | speculative


def test_the_page_the_server_serves_matches_the_release(wheel: Path) -> None:
    release = release_metrics(wheel)
    label_values = release_label_values(wheel)
    for name, (kind, children) in _exported_page().items():
        assert kind == release[name].kind, name
        for labels in children:
            assert set(labels) == set(release[name].labels), name
        last = release[name].labels[-1]
        if name in label_values:
            assert [labels[last] for labels in children] == list(label_values[name]), name


def test_counters_and_histograms_carry_created_in_the_text_format(wheel: Path) -> None:
    """vLLM serves /metrics with prometheus-client's make_asgi_app; counters and histograms
    have a _created series per child. The page stays in the text format, where vLLM's names
    keep their colons (see specops_lab.sim._exposition)."""
    assert "make_asgi_app(registry=registry)" in _normalized(
        wheel, "vllm/entrypoints/serve/instrumentator/metrics.py"
    )
    metrics = _engine_metrics(speculative=True)
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    text = render_metrics(metrics, "m", speculative=True, created=1.5e9).decode()
    assert "# EOF" not in text and "vllm:num_preemptions_total{" in text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name, family in families.items():
        if family.type not in ("counter", "histogram"):
            continue
        children = {tuple(sorted(s.labels.items())) for s in family.samples if "le" not in s.labels}
        created = families[f"{family.name}_created"].samples
        assert {tuple(sorted(s.labels.items())) for s in created} == children, name
        assert {s.value for s in created} == {1.5e9}, name


def test_request_token_buckets_follow_vllms_1_2_5_series() -> None:
    assert request_tokens_buckets(100) == (1, 2, 5, 10, 20, 50, 100)
    assert request_tokens_buckets(4096)[-1] == 2000


def test_finish_reasons_match(wheel: Path) -> None:
    assert release_finish_reasons(wheel) == FINISH_REASONS


def test_speculative_config_keys_and_methods_match_the_release(wheel: Path) -> None:
    assert set(SpeculativeConfig.model_fields) <= release_speculative_keys(wheel)
    assert set(get_args(VllmMethod)) == release_speculative_methods(wheel)


_REPO = Path(__file__).resolve().parents[2]
# Prometheus names a counter's series <name>_total and a histogram's <name>_bucket/_sum/_count.
_SUFFIXES = ("_total", "_bucket", "_sum", "_count")


def _family(series: str) -> str:
    for suffix in _SUFFIXES:
        if series.endswith(suffix) and series.removesuffix(suffix) in ENGINE_METRICS:
            return series.removesuffix(suffix)
    return series


def _vllm_series_read_by_specops() -> dict[str, set[str]]:
    """Every vllm: series named in what specops reads: estimators, dashboards, alert rules."""
    readers = {
        "sidecar estimators": " ".join(
            str(m.value) for kind in (Counter, Gauge, Hist) for m in kind
        ),
        "dashboards": " ".join(
            p.read_text() for p in (_REPO / "charts/specops/dashboards").glob("*.json")
        ),
        "alert rules": (_REPO / "deploy/prometheus/specops.rules.yaml").read_text(),
    }
    return {
        reader: {_family(name) for name in re.findall(r"vllm:[a-z_:]+", text)}
        for reader, text in readers.items()
    }


def test_every_vllm_metric_specops_reads_is_exported_by_the_release_and_the_simulator(
    wheel: Path,
) -> None:
    release = release_metrics(wheel)
    exported = set(_exported_page())
    for reader, names in _vllm_series_read_by_specops().items():
        assert names, f"no vllm: series found in the {reader}: the scan is broken"
        for name in sorted(names):
            assert name in release, f"the {reader} read {name}, which vLLM does not export"
            assert name in exported, f"the {reader} read {name}, which the simulator lacks"


def _normalized(wheel: Path, member: str) -> str:
    """A wheel source file as ast.unparse writes it: one spelling for each expression."""
    return ast.unparse(ast.parse(wheel_source(wheel, member)))


def test_iteration_tokens_count_what_vllm_counts(wheel: Path) -> None:
    """vLLM observes iteration_tokens_total once per IterationStats, which the frontend makes
    only for a step with outputs; it observes the computed prompt tokens of the PrefillStats
    taken with a request's first output (set at its first scheduling, never after a
    preemption) plus the step's new tokens."""
    loggers, frontend = "vllm/v1/metrics/loggers.py", "vllm/v1/engine/async_llm.py"
    scheduler, stats = "vllm/v1/core/sched/scheduler.py", "vllm/v1/metrics/stats.py"
    rule = [
        (
            loggers,
            "self.histogram_iteration_tokens[engine_idx].observe("
            "iteration_stats.prompt_token_stats.computed + iteration_stats.num_generation_tokens)",
        ),
        (frontend, "IterationStats() if log_stats and num_outputs else None"),
        (scheduler, "if request.prefill_stats and request.num_preemptions <= 0:"),
        (scheduler, "prefill_stats = request.take_prefill_stats()"),
        (stats, "self.prompt_token_stats.update_from_output(output.prefill_stats)"),
    ]
    for member, code in rule:
        assert code in _normalized(wheel, member), f"{member} no longer says {code}"
    # A 20 000-token prompt in 8192-token chunks, then 3 more tokens: vLLM observes the step
    # that ends the prefill (the prompt and the first token), then one per decode step.
    engine = SimulatedEngine(Workload(load_workload("gsm8k")), EngineConfig())
    engine.add_request(prompt_tokens=20_000, max_tokens=4, ignore_eos=True)
    assert engine.run_until(60.0) == 6
    histogram = engine.metrics().histograms["vllm:iteration_tokens_total"]
    assert (histogram.count, histogram.total) == (4, 20_000 + 4)


def _method(wheel: Path, member: str, qualified: str) -> str:
    """The source of ``Class.method`` in a wheel file, as ast.unparse writes it."""
    class_name, name = qualified.split(".")
    for node in ast.walk(ast.parse(wheel_source(wheel, member))):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == name:
                    return ast.unparse(item)
    raise AssertionError(f"{member} has no {qualified}")


def test_a_client_abort_reaches_no_request_metric(wheel: Path) -> None:
    """A disconnect cancels AsyncLLM.generate, which aborts the request in the frontend:
    abort_requests drops its state without finished stats, and request_success counts only
    finished stats, so a client abort is in no request metric."""
    generate = _method(wheel, "vllm/v1/engine/async_llm.py", "AsyncLLM.generate")
    assert "except (asyncio.CancelledError, GeneratorExit):" in generate
    assert "await self.abort(q.request_id, internal=True)" in generate
    abort = _method(wheel, "vllm/v1/engine/output_processor.py", "OutputProcessor.abort_requests")
    assert "self.request_states.pop(request_id, None)" in abort
    assert "_update_stats_from_finished" not in abort and "finished_requests" not in abort
    record = _method(wheel, "vllm/v1/metrics/loggers.py", "PrometheusStatLogger.record")
    assert (
        "for finished_request in iteration_stats.finished_requests:\n"
        "        self.counter_request_success[finished_request.finish_reason][engine_idx].inc()"
    ) in record
    engine = SimulatedEngine(Workload(load_workload("gsm8k")), EngineConfig())
    queued, running = engine.add_request(), engine.add_request()
    engine.step()
    assert engine.abort(queued) and engine.abort(running) and not engine.has_work
    metrics = engine.metrics()
    assert set(metrics.success.values()) == {0}
    assert metrics.histograms["vllm:e2e_request_latency_seconds"].count == 0


def test_max_tokens_is_clamped_to_the_room_the_prompt_leaves(wheel: Path) -> None:
    """vLLM refuses a prompt above max_model_len, or max_tokens above it, and otherwise cuts
    max_tokens to max_model_len minus the prompt (the request then ends with "length")."""
    clamp = _normalized(wheel, "vllm/entrypoints/serve/utils/api_utils.py")
    assert "model_max_tokens = max_model_len - input_length" in clamp
    assert "if max_model_len < input_length:" in clamp
    checks = _normalized(wheel, "vllm/renderers/params.py")
    assert "if len(tokens) > max_input_tokens:" in checks
    assert "max_output_tokens > max_total_tokens" in checks
