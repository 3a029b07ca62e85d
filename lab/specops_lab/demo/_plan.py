"""What the demo will do, decided before anything starts: its options, the steps it announces,
and the SpeculativeService it applies (the example, tuned so decisions come within minutes)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from specops_lab.bench import LoadTrace
from specops_lab.cluster import Versions

__all__ = ["DemoOptions", "Step", "demo_service", "plan_steps"]


@dataclass(frozen=True)
class DemoOptions:
    """Everything ``specops demo`` can be told.

    ``profile`` is the controller's belief (the SpeculativeService's performance profile),
    ``truth`` the simulated engines' own physics, which the controller is not given.

    ``window_s`` and ``dwell_s`` are the controller's measurement window and minimum time
    between reconfigurations: seconds here, so a compressed day sees decisions. The
    default truth, an 8B + EAGLE-3 model on an H200, turns compute-bound early: above
    about 130 running requests no k beats no speculation, and the built-in day's midday
    (200 in flight) lies above that, so the controller has a reason to turn speculation
    off and, in the evening, on again. The H200 profile is the controller's matching
    belief (the H100 fit scaled by the datasheet; the truth adds what that fit leaves out).
    The objective is goodput within ``tpot_target_ms``, the benchmark's, so the live
    controller and the virtual-time replay optimise the same thing.
    """

    minutes: float = 7.0
    out_dir: Path = Path("out/demo")
    use_current_context: bool = False
    trace: Path | None = None
    namespace: str = "specops-demo"
    profile: str = "llama3.1-8b-h200"
    truth: str = "llama3.1-8b-h200-eagle3"
    workload: str = "sharegpt"
    startup_delay_s: float = 5.0
    window_s: int = 30
    dwell_s: int = 30
    restart_cost_s: int = 10
    min_gain_percent: float = 2.0
    max_reconfigurations_per_hour: int = 30
    tpot_target_ms: float = 40.0
    refresh_s: float = 3.0
    metrics_source: Literal["Direct", "Prometheus"] = "Direct"


@dataclass(frozen=True)
class Step:
    """One announced step: a short title and what it does, in a user's words."""

    key: str
    title: str
    detail: str


def _cluster_step(options: DemoOptions, cached: bool, cache_dir: Path) -> Step:
    versions = Versions()
    if options.use_current_context:
        return Step(
            "cluster",
            "Use the cluster of the current kubeconfig context",
            "KUBECONFIG, else ~/.kube/config; nothing is started or built",
        )
    if cached:
        return Step(
            "cluster",
            "Start the local Kubernetes control plane",
            f"etcd, kube-apiserver, kube-controller-manager, kube-scheduler {versions.kubernetes}"
            f" and kwok {versions.kwok} with fake GPU nodes on loopback; a few seconds"
            f" (binaries cached in {cache_dir})",
        )
    return Step(
        "cluster",
        "Build the control plane from source, then start it",
        f"kube-apiserver, kube-controller-manager and kube-scheduler {versions.kubernetes} from"
        f" the Go modules of k8s.io/kubernetes, and kwok {versions.kwok}: about 7 minutes on"
        f" the first run, then cached in {cache_dir} (later runs start in seconds)",
    )


def _shape(trace: LoadTrace) -> str:
    levels = [
        f"{s.label or i} {s.concurrency}" for i, s in enumerate(trace.segments) if s.to is None
    ]
    return " -> ".join(levels)


def plan_steps(
    options: DemoOptions, trace: LoadTrace, *, cached: bool, cache_dir: Path, initial_k: int
) -> tuple[Step, ...]:
    """The steps in order, with the facts each announces (durations, sizes, where output goes)."""
    return (
        _cluster_step(options, cached, cache_dir),
        Step(
            "chart",
            "Install the specops Helm chart (Helm library)",
            "CRD, RBAC and the operator's ServiceAccount; the in-cluster operator Deployment is"
            " scaled to 0, since fake nodes run no containers",
        ),
        Step(
            "operator",
            "Run the operator here, as the chart's ServiceAccount",
            "`specops operator` with a token of that account, so it has exactly the chart's RBAC",
        ),
        Step(
            "podrunner",
            "Start the pod runner and Prometheus",
            f"each pod on the fake GPU nodes runs as `specops sim serve` with its own arguments"
            f" (engine truth {options.truth}, workload {options.workload}, model load"
            f" {options.startup_delay_s:g} s) plus its sidecar; Prometheus scrapes them; the"
            f" controller is given the profile {options.profile}, not the truth",
        ),
        Step(
            "service",
            "Apply the demo SpeculativeService",
            f"{options.namespace}/llama: EAGLE-3, k={initial_k} to start, windows of"
            f" {options.window_s} s and at least {options.dwell_s} s between changes",
        ),
        Step(
            "load",
            "Drive a compressed day of load through the service",
            f"{trace.duration_s / 60:g} min of requests in flight: {_shape(trace)}",
        ),
        Step(
            "replay",
            "Replay the same day in virtual time for every policy",
            f"on the engine truth {options.truth}: specops (the same controller code, each"
            " restart charged), no speculation, every static k, vLLM's documented table, the"
            " per-step rule, the best table on the truth, and the oracle (about a minute of"
            " compute)",
        ),
        Step("report", "Write the report", f"{options.out_dir}/report.md and PNG plots"),
    )


def demo_service(
    example: Mapping[str, Any], options: DemoOptions, prometheus_url: str
) -> dict[str, Any]:
    """The example with one replica, one k at a time (no per-batch table, so each decision
    is a visible k), short windows and dwell, a cheap restart, goodput within the demo's
    TPOT target, no model secret, and the metrics source ``options.metrics_source``: each
    pod's sidecar on its pod IP (Direct, the example's own), or the pod runner's
    Prometheus at ``prometheus_url``."""
    service = copy.deepcopy(dict(example))
    service["metadata"] = {**service["metadata"], "namespace": options.namespace}
    spec = service["spec"]
    spec["replicas"] = 1
    spec["engine"].pop("hfTokenSecret", None)
    speculation = spec["speculation"]
    speculation["perBatchSizeSchedule"] = False
    speculation.pop("initialSchedule", None)
    spec["policy"] = {
        **spec.get("policy", {}),
        "evaluationWindowSeconds": options.window_s,
        "minDwellSeconds": options.dwell_s,
        "maxReconfigurationsPerHour": options.max_reconfigurations_per_hour,
        "restartCostSeconds": options.restart_cost_s,
        "minGainPercent": options.min_gain_percent,
        "performanceProfile": options.profile,
        "objective": "Goodput",
        "tpotTargetMilliseconds": options.tpot_target_ms,
    }
    spec["metrics"] = {"source": options.metrics_source, "scrapeIntervalSeconds": 2}
    if options.metrics_source == "Prometheus":
        spec["metrics"]["prometheusUrl"] = prometheus_url
    return service
