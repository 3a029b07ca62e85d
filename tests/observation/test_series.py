"""Both sources' raw answers become the same series."""

import itertools
import math

import pytest

from specops.errors import MetricsError
from specops.observation import (
    cost_point,
    interval_between,
    label_matchers,
    parse_exposition,
    parse_prometheus_matrix,
    prometheus_selector,
    snapshot_from_reading,
)

from .fake_vllm import FakeVllm, matrix_from_pages


def test_page_keeps_only_the_series_the_estimators_read() -> None:
    engine = FakeVllm(k=2)
    engine.draft(10, [7, 4])
    reading = parse_exposition(engine.page(), timestamp=5.0)
    names = {s.name for s in reading.series}
    assert "vllm:spec_decode_num_drafts_total" in names
    assert "vllm:iteration_tokens_total_bucket" in names
    assert not any(n.endswith("_created") for n in names)
    assert "vllm:e2e_request_latency_seconds_bucket" not in names
    assert "vllm:time_to_first_token_seconds_bucket" in names  # first tokens are no decode steps
    per_pos = {
        s.labels["position"]: s.value
        for s in reading.series
        if s.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    }
    assert per_pos == {"0": 7.0, "1": 4.0}
    assert reading.timestamp == 5.0


@pytest.mark.parametrize(
    "page",
    [
        'vllm:num_requests_running{model_name="m",engine="0"} not-a-number\n',
        'vllm:num_requests_running{model_name="m",engine="0 3\n',
        "<html>502 Bad Gateway</html>",
        "",
    ],
)
def test_bad_pages_raise_a_metrics_error(page: str) -> None:
    with pytest.raises(MetricsError):
        parse_exposition(page, timestamp=0.0)


def test_nan_values_parse_and_are_left_to_the_snapshot() -> None:
    page = 'vllm:num_requests_running{model_name="m",engine="0"} NaN\n'
    [series] = parse_exposition(page, timestamp=0.0).series
    assert math.isnan(series.value)


def test_selector_escapes_label_values() -> None:
    selector = prometheus_selector({"pod": 'a"b', "namespace": "ns"})
    assert selector.startswith('{__name__=~"')
    assert 'namespace="ns",pod="a\\"b"}' in selector
    assert "vllm:spec_decode_num_drafts_total" in selector


def test_label_matchers_are_read_as_promql_writes_them() -> None:
    matchers = label_matchers(["namespace=ml", "pod=~llama-.*", "a!=b", "c!~d.*", "x=y=z"])
    assert matchers == (
        ("namespace", "=", "ml"),
        ("pod", "=~", "llama-.*"),
        ("a", "!=", "b"),
        ("c", "!~", "d.*"),
        ("x", "=", "y=z"),
    )
    selector = prometheus_selector(matchers)
    assert selector.endswith(',a!="b",c!~"d.*",namespace="ml",pod=~"llama-.*",x="y=z"}')
    for bad in ("pod", "=ml", "1pod=a"):
        with pytest.raises(ValueError, match="is not a label matcher: write label=value"):
            label_matchers([bad])


def _matrix(*results: tuple[dict[str, str], list[tuple[float, str]]]) -> dict[str, object]:
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": m, "values": [[t, v] for t, v in values]} for m, values in results
            ],
        },
    }


def test_matrix_takes_each_targets_newest_scrape() -> None:
    target = {"job": "vllm", "instance": "10.0.0.1:8000"}
    payload = _matrix(
        ({"__name__": "vllm:num_requests_running", **target}, [(100.0, "3"), (115.0, "5")]),
        ({"__name__": "vllm:generation_tokens_total", **target}, [(100.0, "10"), (115.0, "30")]),
        # Vanished from the target after t=100 (an old engine label): left out after it.
        ({"__name__": "vllm:num_requests_waiting", **target}, [(100.0, "1")]),
    )
    readings = parse_prometheus_matrix(payload)
    assert readings is not None
    assert [r.timestamp for r in readings] == [100.0, 115.0]
    assert [{s.name: s.value for s in r.series} for r in readings] == [
        {
            "vllm:num_requests_running": 3.0,
            "vllm:generation_tokens_total": 10.0,
            "vllm:num_requests_waiting": 1.0,
        },
        {"vllm:num_requests_running": 5.0, "vllm:generation_tokens_total": 30.0},
    ]
    assert all("__name__" not in s.labels for r in readings for s in r.series)
    assert parse_prometheus_matrix(payload, after=100.0) == readings[1:]
    assert parse_prometheus_matrix(payload, after=115.0) == []  # nothing new


def test_each_reading_holds_every_targets_latest_scrape_until_it_goes_stale() -> None:
    """Two pods scraped every 10 s, out of phase: a reading each scrape interval, each what an
    instant query would see then; the second pod's scrapes stop and it drops out after
    ``stale_s``."""
    a = {"__name__": "vllm:num_requests_running", "job": "vllm", "instance": "a:8000"}
    b = {"__name__": "vllm:num_requests_running", "job": "vllm", "instance": "b:8000"}
    payload = _matrix(
        (a, [(100.0, "1"), (110.0, "2"), (120.0, "3"), (130.0, "4")]),
        (b, [(104.0, "7"), (114.0, "8")]),
    )
    readings = parse_prometheus_matrix(payload, stale_s=10.0)
    assert readings is not None
    seen = [
        (r.timestamp, sorted((s.labels["instance"], s.value) for s in r.series)) for r in readings
    ]
    assert seen == [
        (100.0, [("a:8000", 1.0)]),
        (110.0, [("a:8000", 2.0), ("b:8000", 7.0)]),
        (120.0, [("a:8000", 3.0), ("b:8000", 8.0)]),
        (130.0, [("a:8000", 4.0)]),  # b last scraped 16 s before
    ]
    # Read again after b's scrape at 114 alone: too soon after 110 for a reading of its own.
    assert parse_prometheus_matrix(payload, after=110.0, stale_s=10.0) == readings[2:]


def test_pods_scraped_out_of_phase_give_true_step_times() -> None:
    """Each pod runs 100 steps of 0.1 s between its scrapes, 5 s out of phase with the other;
    every interval between readings then holds one scrape of each, so T = 0.1 s."""
    pods = {"a:8000": (FakeVllm(k=0), 100.0), "b:8000": (FakeVllm(k=0), 105.0)}
    results: list[object] = []
    for instance, (engine, first) in pods.items():
        engine.load(running=8)
        scrapes = []
        for i in range(7):
            engine.steps([8.0] * 100)
            scrapes.append((first + 10 * i, engine.page()))
        results += matrix_from_pages(*scrapes, instance=instance)["data"]["result"]
    readings = parse_prometheus_matrix(
        {"status": "success", "data": {"resultType": "matrix", "result": results}}, after=105.0
    )
    assert readings is not None
    assert [r.timestamp for r in readings] == [115.0, 125.0, 135.0, 145.0, 155.0, 165.0]
    snapshots = [snapshot_from_reading(r) for r in readings]
    points = [cost_point(interval_between(a, b)) for a, b in itertools.pairwise(snapshots)]
    assert [p.step_seconds if p else None for p in points] == pytest.approx([0.1] * 5)


def test_empty_matrix_is_no_reading() -> None:
    assert parse_prometheus_matrix(_matrix()) is None


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "bad_data"),
        ({"status": "success", "data": {"resultType": "vector", "result": []}}, "matrix"),
        ({"status": "success", "data": {"resultType": "matrix", "result": [{}]}}, "malformed"),
        ([], "JSON object"),
    ],
)
def test_prometheus_errors_raise_a_metrics_error(payload: object, message: str) -> None:
    with pytest.raises(MetricsError, match=message):
        parse_prometheus_matrix(payload)
