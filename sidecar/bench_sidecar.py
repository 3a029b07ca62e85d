"""Sidecar speed and footprint: ingest time per scrape, resident memory, CPU at 15 s.

Pages come from the simulated engine run in virtual time (a closed loop at fixed
concurrency, read every 15 s), rendered exactly as ``specops sim serve`` renders them.

1. Ingest: parse one page, turn it into a snapshot and an interval, recompute every
   window's estimates with 15 minutes of history; and, apart, the full observation with
   the step-time fit and the policy's prediction.
2. Footprint: a real ``specops sidecar`` process reads a local server that hands out
   the next page on each request; a client fetches its ``/metrics`` and
   ``/v1/observation`` once per interval, as Prometheus and the operator would. CPU is
   the process's user + system time over the measured span, RSS from /proc.

Run: .venv/bin/python sidecar/bench_sidecar.py [--duration 120] [--output FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from specops_lab.launch import free_ports, specops_executable, stop_process, wait_until_answers
from specops_lab.sim import EngineConfig, SimulatedEngine, Workload, load_workload, render_metrics
from specops_lab.sim import parse_speculative_config as speculative

from specops.observation import (
    Interval,
    ObserverConfig,
    Snapshot,
    SourceObservation,
    interval_between,
    observe,
    parse_exposition,
    snapshot_from_reading,
)
from specops.profiles import get_profile

PROFILE = "llama3.1-8b-h100"
INTERVAL_S = 15.0
# Issue 4's targets: (section, measured key, label, target); every measure must stay below.
TARGETS = (
    ("ingest", "ingest_ms_median", "ingest of one scrape, median (ms)", 5.0),
    ("footprint", "rss_mib", "resident memory of the sidecar (MiB)", 60.0),
    ("footprint", "cpu_percent_of_one_core", "CPU at a 15 s scrape (% of a core)", 1.0),
)


def engine_pages(count: int, concurrency: int = 24) -> list[str]:
    """``count`` pages of one engine under a closed loop, 15 virtual seconds apart."""
    config = EngineConfig(
        served_model_name="llama",
        speculative=speculative('{"method": "eagle", "model": "d", "num_speculative_tokens": 3}'),
    )
    engine = SimulatedEngine(Workload(load_workload("sharegpt")), config)
    for _ in range(concurrency):
        engine.add_request()
    pages: list[str] = []
    while len(pages) < count:
        engine.run_until(engine.now + INTERVAL_S)
        for _ in engine.take_finished():
            engine.add_request()
        pages.append(render_metrics(engine.metrics(), "llama", speculative=True).decode())
    return pages


def ingest(pages: list[str]) -> dict[str, float]:
    """Per reading, as the sidecar does it: parse, snapshot, one new interval, observe.

    ``estimates_ms`` observes without a profile (every window estimate, no step-time fit,
    no prediction); ``observe_ms`` is the full observation, the policy's prediction
    (``specops.policy.choose`` over every candidate k and batch size) included.
    """
    full = ObserverConfig(
        namespace="ns",
        pod="llama-0",
        service="llama",
        cost_model=get_profile(PROFILE).cost_model("eagle"),
        method="eagle",
    )
    bare = dataclasses.replace(full, cost_model=None)
    source = SourceObservation(kind="direct", target="bench", up=True)
    keep = int(max(full.windows_s) / INTERVAL_S)
    timings: dict[str, list[float]] = {"parse_snapshot": [], "estimates": [], "observe": []}
    for round_ in range(3):
        snapshots: deque[Snapshot] = deque()
        intervals: deque[Interval] = deque()
        for i, page in enumerate(pages):
            now = 1000.0 + INTERVAL_S * i
            t0 = time.perf_counter()
            snapshot = snapshot_from_reading(parse_exposition(page, now))
            if snapshots:
                intervals.append(interval_between(snapshots[-1], snapshot))
            snapshots.append(snapshot)
            if len(snapshots) > keep:
                snapshots.popleft()
                intervals.popleft()
            t1 = time.perf_counter()
            observe(snapshots, now, bare, source, intervals)
            t2 = time.perf_counter()
            observe(snapshots, now, full, source, intervals)
            t3 = time.perf_counter()
            if round_ > 0 and len(snapshots) == keep:
                timings["parse_snapshot"].append((t1 - t0) * 1e3)
                timings["estimates"].append((t2 - t1) * 1e3)
                timings["observe"].append((t3 - t2) * 1e3)
    ingest_ms = [
        a + b for a, b in zip(timings["parse_snapshot"], timings["estimates"], strict=True)
    ]
    lines = pages[-1].splitlines()
    return {
        "page_series": sum(1 for line in lines if line and not line.startswith("#")),
        "page_bytes": len(pages[-1]),
        "history_readings": keep,
        "windows": len(full.windows_s),
        **{f"{name}_ms_median": statistics.median(v) for name, v in timings.items()},
        "ingest_ms_median": statistics.median(ingest_ms),
        "ingest_ms_p95": sorted(ingest_ms)[int(0.95 * len(ingest_ms))],
    }


def _serve_pages(pages: list[str]) -> ThreadingHTTPServer:
    lock = threading.Lock()
    position = {"i": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                page = pages[position["i"] % len(pages)]
                position["i"] += 1
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _proc(pid: int) -> tuple[float, int, int]:
    """CPU seconds (user + system), VmRSS and VmHWM in KiB."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return cpu, int(status["VmRSS"].split()[0]), int(status["VmHWM"].split()[0])


def footprint(pages: list[str], duration_s: float) -> dict[str, float]:
    server = _serve_pages(pages)
    (port,) = free_ports(1)
    engine = f"http://127.0.0.1:{server.server_port}"
    command = [specops_executable(), "sidecar", "--engine-url", engine]
    command += ["--host", "127.0.0.1", "--port", str(port), "--profile", PROFILE]
    command += ["--method", "eagle", "--scrape-interval", str(INTERVAL_S), "--log-level", "ERROR"]
    process = subprocess.Popen(command)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answers(f"{base}/healthz", process, timeout_s=30.0)
        time.sleep(2.0)
        cpu0, _, _ = _proc(process.pid)
        start = time.monotonic()
        while time.monotonic() - start < duration_s:
            httpx.get(f"{base}/metrics", timeout=5).raise_for_status()
            httpx.get(f"{base}/v1/observation", timeout=5).raise_for_status()
            time.sleep(INTERVAL_S)
        elapsed = time.monotonic() - start
        cpu1, rss, hwm = _proc(process.pid)
        observation = httpx.get(f"{base}/v1/observation", timeout=5).json()
    finally:
        stop_process(process)
        server.shutdown()
    return {
        "measured_seconds": elapsed,
        "cpu_seconds": cpu1 - cpu0,
        "cpu_percent_of_one_core": 100.0 * (cpu1 - cpu0) / elapsed,
        "rss_mib": rss / 1024,
        "peak_rss_mib": hwm / 1024,
        "readings_in_longest_window": observation["windows"][-1]["readings"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=120.0, help="Seconds to measure CPU.")
    parser.add_argument("--output", type=Path, default=Path("out/sidecar-benchmark.json"))
    args = parser.parse_args()
    pages = engine_pages(80)
    results = {"ingest": ingest(pages), "footprint": footprint(pages, args.duration)}
    results["targets"] = {key: target for _, key, _, target in TARGETS}
    text = json.dumps(results, indent=2)
    print(text)
    print(f"\n{'':38} {'measured':>9} {'target':>8}")
    for section, key, label, target in TARGETS:
        value = results[section][key]
        verdict = "ok" if value < target else "OVER TARGET"
        print(f"{label:38} {value:9.2f} {'< ' + format(target, 'g'):>8}  {verdict}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text + "\n")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
