"""The operator's control loop without Kubernetes, for the dashboards' PromQL tests.

Each tick does what the operator's tick does between reading the API and writing status:
the pod's observation from its real sidecar (the operator's own ``SidecarSource``), the
window (``service_window``), the pure ``decide``, and the operator's own metric recording
into its registry, which ``serving_operator_metrics`` serves as the operator pod does.

The engine is never restarted here, so a config the controller applies never becomes Ready:
its rollout times out and is rolled back, as it would be in a cluster whose new pods fail.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import yaml
from prometheus_client import REGISTRY, start_http_server
from specops_lab.launch import free_ports
from specops_operator._control import _report
from specops_operator._fetch import PodTarget, SidecarSource
from specops_operator._metrics import forget_service, start_service

from specops.api import parse_service
from specops.control import (
    ControllerState,
    ControlSettings,
    Mode,
    decide,
    service_model,
    service_window,
)
from specops.policy import SpecConfig
from specops.profiles import get_profile
from specops.render import apply_defaults

__all__ = ["OPERATOR_TARGET_LABELS", "drive_decisions", "serving_operator_metrics"]

# What the chart's ServiceMonitor puts on the operator's series (with honorLabels, the
# metrics' own namespace and service, naming the SpeculativeService, win).
OPERATOR_TARGET_LABELS = {
    "namespace": "specops-system",
    "service": "specops-metrics",
    "pod": "specops-5d8f7c9b4-x2x7q",
    "container": "operator",
    "endpoint": "metrics",
}
_LOOPBACK = "127.0.0.1"
_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama.yaml"
_WINDOW_S = 10.0
_SETTINGS = ControlSettings(
    mode=Mode.AUTO,
    min_gain=0.0,
    margin=0.0,
    restart_cost_s=1.0,
    min_dwell_s=0.0,
    max_staleness_s=60.0,
    min_drafts=50,
    min_load_samples=3,
    rollout_timeout_s=3.0,
    rollback_cooldown_s=3600.0,
)


@contextmanager
def serving_operator_metrics(namespace: str, service: str) -> Iterator[str]:
    """The operator's registry on a free loopback port, as ``specops operator`` serves it;
    yields ``host:port``. The service's series are dropped afterwards."""
    (port,) = free_ports(1)
    server, thread = start_http_server(port, addr=_LOOPBACK, registry=REGISTRY)
    try:
        yield f"{_LOOPBACK}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        forget_service(namespace, service)


async def drive_decisions(
    sidecar: str, namespace: str, service: str, pod: str, engine_k: int, seconds: float
) -> Counter[tuple[str, str]]:
    """Decide once a second for ``seconds`` from the pod's sidecar, recording each decision
    as the operator does; returns how many of each (action, reason code) were taken."""
    host, port = sidecar.removeprefix("http://").rsplit(":", 1)
    spec = apply_defaults(parse_service(yaml.safe_load(_EXAMPLE.read_text("utf-8"))).spec)
    running = SpecConfig.static(engine_k)
    profile = get_profile("llama3.1-8b-h100")
    model = service_model(profile, "eagle3", max_batch=spec.engine.max_num_seqs)
    state = ControllerState.initial(running)
    taken: Counter[tuple[str, str]] = Counter()
    deadline = time.monotonic() + seconds
    start_service(namespace, service)  # as the operator's loop does for each service
    async with httpx.AsyncClient(timeout=10) as client:
        source = SidecarSource(client, port=int(port))
        while time.monotonic() < deadline:
            fetched = await source.fetch(namespace, service, spec, [PodTarget(pod, host)])
            now = time.time()
            window = service_window(
                fetched.observations,
                fetched.failures,
                window_s=_WINDOW_S,
                in_force=state.config,
                now=now,
                pods_ready=state.config == running,  # the engine keeps running its config
                kv_capacity_tokens=profile.kv_capacity("eagle3"),
            )
            decision = decide(state, window.control_input, model, _SETTINGS, now)
            _report(namespace, service, Mode.AUTO.value, decision)
            taken[decision.action.value, decision.code.value] += 1
            state = decision.state
            await asyncio.sleep(1.0)
    return taken
