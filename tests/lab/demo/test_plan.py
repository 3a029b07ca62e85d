"""The announced steps, and the SpeculativeService the demo applies."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml
from specops_lab.demo import DemoOptions, demo_service, load_demo_trace, plan_steps

from specops.api import parse_service

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llama.yaml"
CACHE = Path("/cache/specops")


def _steps(options: DemoOptions, cached: bool) -> dict[str, tuple[str, str]]:
    trace = load_demo_trace(None, options.minutes)
    steps = plan_steps(options, trace, cached=cached, cache_dir=CACHE, initial_k=3)
    return {s.key: (s.title, s.detail) for s in steps}


def test_steps_run_in_order_and_say_where_the_report_goes() -> None:
    trace = load_demo_trace(None, 6)
    steps = plan_steps(DemoOptions(), trace, cached=True, cache_dir=CACHE, initial_k=3)
    keys = [s.key for s in steps]
    assert keys == [
        "cluster",
        "chart",
        "operator",
        "podrunner",
        "service",
        "load",
        "replay",
        "report",
    ]
    assert "out/demo/report.md" in steps[-1].detail
    assert "6 min" in steps[keys.index("load")].detail  # the minutes asked, not the day's 7
    assert "night 4 -> midday 200 -> late 8" in steps[keys.index("load")].detail
    replay = steps[keys.index("replay")].detail
    assert "llama3.1-8b-h200-eagle3" in replay and "the oracle" in replay


def test_first_run_announces_the_build_and_its_duration() -> None:
    title, detail = _steps(DemoOptions(), cached=False)["cluster"]
    assert title == "Build the control plane from source, then start it"
    assert "about 7 minutes on the first run" in detail
    assert str(CACHE) in detail
    warm_title, warm_detail = _steps(DemoOptions(), cached=True)["cluster"]
    assert warm_title == "Start the local Kubernetes control plane"
    assert "a few seconds" in warm_detail


def test_current_context_starts_and_builds_nothing() -> None:
    title, detail = _steps(DemoOptions(use_current_context=True), cached=False)["cluster"]
    assert "current kubeconfig context" in title
    assert "nothing is started or built" in detail


def test_demo_service_is_the_example_tuned_for_minutes_and_still_valid() -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    options = DemoOptions(namespace="demo-ns", window_s=40, dwell_s=60)
    service = demo_service(example, options, "http://127.0.0.1:9999")
    parsed = parse_service(service)  # the same checks as the CRD's CEL rules
    assert parsed.metadata.namespace == "demo-ns"
    assert parsed.spec.replicas == 1
    assert parsed.spec.speculation.per_batch_size_schedule is False
    assert parsed.spec.speculation.initial_schedule is None
    assert parsed.spec.engine.hf_token_secret is None
    assert parsed.spec.policy.evaluation_window_seconds == 40
    assert parsed.spec.policy.min_dwell_seconds == 60
    assert parsed.spec.policy.objective == "Goodput"
    assert parsed.spec.policy.tpot_target_milliseconds == options.tpot_target_ms
    assert parsed.spec.metrics.source == "Direct"
    assert parsed.spec.metrics.prometheus_url is None
    assert parsed.spec.metrics.scrape_interval_seconds == 2
    prometheus = replace(options, metrics_source="Prometheus")
    parsed = parse_service(demo_service(example, prometheus, "http://127.0.0.1:9999"))
    assert parsed.spec.metrics.source == "Prometheus"
    assert parsed.spec.metrics.prometheus_url == "http://127.0.0.1:9999"
    assert example["metadata"]["namespace"] == "default"  # the input is left alone
    assert example["spec"]["speculation"]["perBatchSizeSchedule"] is True
