"""Pure renderers: a SpeculativeService spec plus the speculation in force -> Kubernetes objects.

No I/O and no mutation: every function builds fresh dicts from frozen inputs, so the same
inputs always give the same objects, and their hash (an annotation) tells the operator
whether a child needs a write at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specops import __version__
from specops.api import SpeculativeServiceSpec
from specops.policy import SpecConfig
from specops.profiles import PROFILES, PerformanceProfile, find_profile
from specops.render._speculation import vllm_speculative_config
from specops.vllm import MAX_NUM_SEQS_DEFAULT

__all__ = [
    "CANARY_LABEL",
    "ENGINE_PORT",
    "HASH_ANNOTATION",
    "OWNER_UID_LABEL",
    "PRE_STOP_SLEEP_SECONDS",
    "SIDECAR_PORT",
    "RenderOptions",
    "Selector",
    "canary_name",
    "child_labels",
    "engine_shutdown_timeout",
    "render_deployment",
    "render_objects",
    "render_pdb",
    "render_pod_monitor",
    "render_service",
    "selector_labels",
]

Obj = dict[str, Any]

ENGINE_PORT = 8000
SIDECAR_PORT = 9090
# The job labels of what specops scrapes, so that its alerts and dashboards see only its own
# targets (the Prometheus Operator gives every target of every PodMonitor and ServiceMonitor
# a service label): the vLLM pods and their sidecars (the PodMonitor rendered here), and the
# operator (the chart's ServiceMonitor).
PODS_JOB = "specops-pods"
OPERATOR_JOB = "specops-operator"
HASH_ANNOTATION = "specops.io/render-hash"
SPECULATIVE_CONFIG_ANNOTATION = "specops.io/speculative-config"
GPU_RESOURCE = "nvidia.com/gpu"
# A stopping pod waits this long before its engine gets SIGTERM: the Service's endpoints
# (kube-proxy, ingress and mesh proxies) drop it meanwhile, so no new request reaches an
# engine that has begun to refuse them.
PRE_STOP_SLEEP_SECONDS = 5
# What vLLM needs after draining to tear down (engine core processes, GPU memory) before
# the grace period ends in SIGKILL.
_TEARDOWN_SECONDS = 5


# The label only the operator sets: the uid of the SpeculativeService that owns the pods.
OWNER_UID_LABEL = "specops.io/owner-uid"
# Labels that select one service's pods: a Deployment's matchLabels.
Selector = Mapping[str, str]
# On a canary's pods only: the controller measures them apart from the rest.
CANARY_LABEL = "specops.io/canary"


def canary_name(name: str) -> str:
    """The canary Deployment of the SpeculativeService ``name``."""
    return f"{name}-canary"


@dataclass(frozen=True)
class RenderOptions:
    """Operator-level settings that are not part of any one SpeculativeService."""

    sidecar_image: str = f"ghcr.io/specops/specops:{__version__}"
    pod_monitor: bool = False


def selector_labels(name: str, uid: str | None = None) -> dict[str, str]:
    """Labels that select the pods of one SpeculativeService (immutable in a Deployment).

    The owner's uid is among them: another pod carrying the ``app.kubernetes.io`` labels
    (anyone may set those) joins neither the Service's endpoints, nor the PDB, nor what the
    controller measures. Without a uid (``specops render`` of a manifest) it is left out.
    """
    labels = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name}
    return {**labels, OWNER_UID_LABEL: uid} if uid else labels


def child_labels(name: str) -> dict[str, str]:
    """Labels on every object specops creates for a SpeculativeService."""
    return {
        **selector_labels(name),
        "app.kubernetes.io/managed-by": "specops",
        "specops.io/service": name,
    }


def _metadata(name: str, namespace: str, owner: str) -> Obj:
    return {"name": name, "namespace": namespace, "labels": child_labels(owner)}


def _with_hash(obj: Obj) -> Obj:
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]
    metadata = {**obj["metadata"], "annotations": {HASH_ANNOTATION: digest}}
    return {**obj, "metadata": metadata}


def _http_probe(path: str, port: str, period: int, failures: int) -> Obj:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def engine_shutdown_timeout(spec: SpeculativeServiceSpec) -> int:
    """vLLM's --shutdown-timeout: the grace period less the preStop pause and the teardown."""
    grace = spec.engine.termination_grace_period_seconds
    return grace - PRE_STOP_SLEEP_SECONDS - _TEARDOWN_SECONDS


def _engine_args(spec: SpeculativeServiceSpec, speculative_config: str | None) -> list[str]:
    engine = spec.engine
    args = [
        spec.model,
        "--host",
        "0.0.0.0",
        "--port",
        str(ENGINE_PORT),
        "--served-model-name",
        spec.served_model_name or spec.model,
        "--tensor-parallel-size",
        str(engine.tensor_parallel_size),
        "--max-num-seqs",
        str(engine.max_num_seqs),
        "--shutdown-timeout",
        str(engine_shutdown_timeout(spec)),
    ]
    if engine.max_model_len is not None:
        args += ["--max-model-len", str(engine.max_model_len)]
    if speculative_config is not None:
        args += ["--speculative-config", speculative_config]
    return [_kubelet_literal(arg) for arg in [*args, *engine.extra_args]]


def _kubelet_literal(text: str) -> str:
    """``text`` as the container must see it: the kubelet expands ``$(VAR)`` in command,
    args and env values (``servedModelName: "$(HF_TOKEN)"`` would publish the token in
    ``/v1/models``), and ``$$`` is its escape for a literal ``$``."""
    return text.replace("$", "$$")


def _engine_env(spec: SpeculativeServiceSpec) -> list[Obj]:
    env: list[Obj] = [
        {"name": "HF_HOME", "value": _kubelet_literal(spec.engine.model_cache.mount_path)}
    ]
    token = spec.engine.hf_token_secret
    if token is not None:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}},
            }
        )
    for var in spec.engine.env:
        rendered = var.model_dump(by_alias=True, exclude_none=True)
        if "value" in rendered:
            rendered["value"] = _kubelet_literal(rendered["value"])
        env.append(rendered)
    return env


def _engine_resources(spec: SpeculativeServiceSpec) -> Obj:
    gpus = str(spec.engine.gpus_per_pod)
    user = spec.engine.resources
    requests = {key: str(value) for key, value in ((user and user.requests) or {}).items()}
    limits = {key: str(value) for key, value in ((user and user.limits) or {}).items()}
    return {
        "requests": {**requests, GPU_RESOURCE: gpus},
        "limits": {**limits, GPU_RESOURCE: gpus},
    }


def _engine_container(spec: SpeculativeServiceSpec, speculative_config: str | None) -> Obj:
    return {
        "name": "vllm",
        "image": spec.engine.image,
        "command": ["vllm", "serve"],
        "args": _engine_args(spec, speculative_config),
        "ports": [{"name": "http", "containerPort": ENGINE_PORT, "protocol": "TCP"}],
        "env": _engine_env(spec),
        "resources": _engine_resources(spec),
        # The HTTP server starts only after the weights are loaded: allow 30 minutes.
        "startupProbe": _http_probe("/health", "http", period=10, failures=180),
        "readinessProbe": _http_probe("/health", "http", period=5, failures=3),
        "livenessProbe": _http_probe("/health", "http", period=15, failures=4),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_SECONDS}}},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "model-cache", "mountPath": spec.engine.model_cache.mount_path},
        ],
        "securityContext": _engine_security(spec),
    }


def _engine_security(spec: SpeculativeServiceSpec) -> Obj:
    """No capabilities and no escalation always (vLLM needs neither); the user, from the spec."""
    context: Obj = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    user = spec.engine.security_context
    if user is not None:
        chosen = user.model_dump(by_alias=True, exclude_none=True, exclude={"fs_group"})
        context.update(chosen)
    return context


def _pod_security(spec: SpeculativeServiceSpec) -> Obj:
    user = spec.engine.security_context
    context: Obj = {"seccompProfile": {"type": "RuntimeDefault"}}
    if user is not None and user.fs_group is not None:
        context["fsGroup"] = user.fs_group
    return context


def performance_profile(spec: SpeculativeServiceSpec) -> PerformanceProfile | None:
    """The spec's profile, else the catalog's first for its model and tensor parallelism."""
    return find_profile(
        spec.policy.performance_profile,
        model=spec.model,
        tensor_parallel_size=spec.engine.tensor_parallel_size,
        gpu=spec.engine.gpu,
    )


def _sidecar_container(
    name: str,
    namespace: str,
    spec: SpeculativeServiceSpec,
    options: RenderOptions,
    table_config: str | None,
) -> Obj:
    """The sidecar; ``table_config`` is the engine's --speculative-config when it holds a
    per-batch-size table, which the sidecar's acceptance must correct for (passed only
    then, so a service without a table keeps its pod template). The engine's batch limit
    is passed, for the same reason, only when it is not the sidecar's default."""
    args = [
        "--engine-url",
        f"http://127.0.0.1:{ENGINE_PORT}",
        "--port",
        str(SIDECAR_PORT),
        "--namespace",
        namespace,
        "--pod",
        "$(POD_NAME)",
        "--service",
        name,
    ]
    if spec.metrics.source == "Prometheus" and spec.metrics.prometheus_url is not None:
        args += ["--prometheus-url", _kubelet_literal(spec.metrics.prometheus_url)]
    args += [
        "--scrape-interval",
        str(spec.metrics.scrape_interval_seconds),
        "--method",
        spec.speculation.method,
    ]
    profile = performance_profile(spec)
    if profile is not None and profile.name in PROFILES:
        args += ["--profile", profile.name]
    elif profile is not None and spec.engine.gpu is not None:
        # A derived prior: the sidecar derives the same one from what it was derived from.
        args += [
            "--model",
            spec.model,
            "--gpu",
            spec.engine.gpu,
            "--tensor-parallel-size",
            str(spec.engine.tensor_parallel_size),
        ]
    if spec.engine.max_num_seqs != MAX_NUM_SEQS_DEFAULT:
        args += ["--max-num-seqs", str(spec.engine.max_num_seqs)]
    if table_config is not None:
        args += ["--speculative-config", table_config]
    return {
        "name": "specops-sidecar",
        "image": options.sidecar_image,
        "command": ["specops", "sidecar"],
        "args": args,
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [{"name": "metrics", "containerPort": SIDECAR_PORT, "protocol": "TCP"}],
        "readinessProbe": _http_probe("/healthz", "metrics", period=10, failures=3),
        "livenessProbe": _http_probe("/healthz", "metrics", period=20, failures=3),
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"memory": "256Mi"},
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _volumes(spec: SpeculativeServiceSpec) -> list[Obj]:
    cache = spec.engine.model_cache
    if cache.claim_name is not None:
        cache_volume: Obj = {"persistentVolumeClaim": {"claimName": cache.claim_name}}
    elif cache.size_limit is not None:
        cache_volume = {"emptyDir": {"sizeLimit": str(cache.size_limit)}}
    else:
        cache_volume = {"emptyDir": {}}
    return [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": str(spec.engine.shm_size)}},
        {"name": "model-cache", **cache_volume},
    ]


def render_deployment(
    name: str,
    namespace: str,
    spec: SpeculativeServiceSpec,
    speculation: SpecConfig,
    options: RenderOptions,
    selector: Selector,
    *,
    replicas: int | None = None,
    canary: bool = False,
) -> Obj:
    """The vLLM Deployment: engine plus sidecar; a spec change rolls with no capacity lost,
    and an old pod finishes its running requests before it goes (preStop pause, then
    vLLM's --shutdown-timeout within the grace period).

    ``canary``: the canary's own Deployment (``NAME-canary``), whose pods carry the
    service's selector labels (the Service sends them its share of the requests) and
    :data:`CANARY_LABEL`, which its selector adds. ``replicas`` overrides the spec's."""
    config = vllm_speculative_config(spec, speculation)
    speculative_config = config.to_json() if config is not None else None
    pod_spec: Obj = {
        "containers": [
            _engine_container(spec, speculative_config),
            _sidecar_container(
                name,
                namespace,
                spec,
                options,
                speculative_config if speculation.per_batch_size else None,
            ),
        ],
        "terminationGracePeriodSeconds": spec.engine.termination_grace_period_seconds,
        "volumes": _volumes(spec),
        "securityContext": _pod_security(spec),
        # Neither container talks to the Kubernetes API.
        "automountServiceAccountToken": False,
    }
    if spec.engine.node_selector:
        pod_spec["nodeSelector"] = dict(spec.engine.node_selector)
    if spec.engine.tolerations:
        pod_spec["tolerations"] = [
            t.model_dump(by_alias=True, exclude_none=True) for t in spec.engine.tolerations
        ]
    if spec.engine.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s.name} for s in spec.engine.image_pull_secrets]
    own = {**selector, CANARY_LABEL: "true"} if canary else dict(selector)
    return _with_hash(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _metadata(canary_name(name) if canary else name, namespace, name),
            "spec": {
                "replicas": spec.replicas if replicas is None else replicas,
                "selector": {"matchLabels": own},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
                },
                "template": {
                    "metadata": {
                        "labels": {**child_labels(name), **own},
                        "annotations": {SPECULATIVE_CONFIG_ANNOTATION: speculative_config or "off"},
                    },
                    "spec": pod_spec,
                },
            },
        }
    )


def render_service(name: str, namespace: str, selector: Selector) -> Obj:
    """ClusterIP Service: the OpenAI API on 8000 and the sidecar's metrics on 9090."""
    return _with_hash(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _metadata(name, namespace, name),
            "spec": {
                "type": "ClusterIP",
                "selector": dict(selector),
                "ports": [
                    {"name": "http", "port": ENGINE_PORT, "targetPort": "http", "protocol": "TCP"},
                    {
                        "name": "metrics",
                        "port": SIDECAR_PORT,
                        "targetPort": "metrics",
                        "protocol": "TCP",
                    },
                ],
            },
        }
    )


def render_pdb(name: str, namespace: str, selector: Selector) -> Obj:
    """At most one pod voluntarily evicted at a time (each holds GPUs and a loaded model)."""
    return _with_hash(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": _metadata(f"{name}-pdb", namespace, name),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(selector)}},
        }
    )


def render_pod_monitor(
    name: str, namespace: str, spec: SpeculativeServiceSpec, selector: Selector
) -> Obj:
    """PodMonitor scraping vLLM's and the sidecar's /metrics (Prometheus Operator).

    Every series must carry ``namespace``, ``pod`` and ``service`` (the SpeculativeService):
    vLLM's get ``service`` from the pod's ``specops.io/service`` label; the sidecar sets
    all three itself, so its labels are honoured over the target's.
    """
    interval = f"{spec.metrics.scrape_interval_seconds}s"
    service_label = {
        "action": "replace",
        "sourceLabels": ["__meta_kubernetes_pod_label_specops_io_service"],
        "targetLabel": "service",
    }
    # One job for every specops pod target, which the alerts select on.
    job_label = {"action": "replace", "targetLabel": "job", "replacement": PODS_JOB}
    return _with_hash(
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": _metadata(name, namespace, name),
            "spec": {
                "selector": {"matchLabels": dict(selector)},
                "podMetricsEndpoints": [
                    {
                        "port": "http",
                        "path": "/metrics",
                        "interval": interval,
                        "relabelings": [service_label, job_label],
                    },
                    {
                        "port": "metrics",
                        "path": "/metrics",
                        "interval": interval,
                        "honorLabels": True,
                        "relabelings": [job_label],
                    },
                ],
            },
        }
    )


def render_objects(
    name: str,
    namespace: str,
    spec: SpeculativeServiceSpec,
    speculation: SpecConfig,
    options: RenderOptions,
    selector: Selector,
    canary: SpecConfig | None = None,
) -> list[Obj]:
    """Every child of a SpeculativeService, in apply order, all selecting with ``selector``.

    With a ``canary`` config one of the replicas moves to the canary's Deployment."""
    replicas = spec.replicas - 1 if canary is not None else spec.replicas
    objects = [
        render_deployment(name, namespace, spec, speculation, options, selector, replicas=replicas)
    ]
    if canary is not None:
        objects.append(
            render_deployment(
                name, namespace, spec, canary, options, selector, replicas=1, canary=True
            )
        )
    objects += [
        render_service(name, namespace, selector),
        render_pdb(name, namespace, selector),
    ]
    if options.pod_monitor:
        objects.append(render_pod_monitor(name, namespace, spec, selector))
    return objects
