"""A pod's own containers become the simulated engine and the sidecar, with only ports moved."""

from __future__ import annotations

import json
from typing import Any

import pytest
from specops_lab.podrunner import (
    STARTUP_DELAY_ANNOTATION,
    TRUTH_ANNOTATION,
    WORKLOAD_ANNOTATION,
    PodLaunch,
    PodRunnerError,
    SimOptions,
    container_env,
    expand,
    launch_plan,
    parse_pod,
)

from tests.lab.podrunner.pods import llama_deployment, pod_of

SPECOPS = ("/venv/bin/specops",)


def _flag(argv: tuple[str, ...], flag: str) -> list[str]:
    return [argv[i + 1] for i, token in enumerate(argv) if token == flag]


def _launch(pod: dict[str, Any], sim: SimOptions | None = None) -> PodLaunch:
    return launch_plan(parse_pod(pod), sim or SimOptions(), SPECOPS)


def test_engine_runs_the_pods_own_args_under_the_simulated_engine() -> None:
    deployment = llama_deployment("team-a")
    written = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    launch = _launch(pod_of(deployment))
    argv = launch.engine.argv
    assert argv[:4] == (*SPECOPS, "sim", "serve", "meta-llama/Llama-3.1-8B-Instruct")
    config = written[written.index("--speculative-config") + 1]
    assert _flag(argv, "--speculative-config") == [config]
    assert launch.speculative_config == config
    assert json.loads(config)["num_speculative_tokens"] == 3
    for flag in ("--served-model-name", "--max-num-seqs", "--max-model-len", "--shutdown-timeout"):
        assert _flag(argv, flag) == [written[written.index(flag) + 1]]
    # On the pod's own address, at the port its args name, as a real pod listens.
    assert _flag(argv, "--port") == ["8000"]
    assert _flag(argv, "--host") == ["127.200.0.1"]
    assert launch.engine.url == "http://127.200.0.1:8000"
    assert (launch.key.namespace, launch.service, launch.node) == ("team-a", "llama", "kwok-gpu-0")


def test_the_pods_grace_period_and_prestop_sleeps_are_kept_for_stopping() -> None:
    deployment = llama_deployment()
    pod_spec = deployment["spec"]["template"]["spec"]
    launch = _launch(pod_of(deployment))
    assert launch.grace_s == pod_spec["terminationGracePeriodSeconds"]
    engine_hook = pod_spec["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert launch.sidecar is not None
    assert (launch.engine.pre_stop_s, launch.sidecar.pre_stop_s) == (engine_hook, 0.0)


def test_without_a_grace_period_or_sleep_hook_kubernetes_defaults_apply() -> None:
    pod = pod_of(llama_deployment())
    del pod["spec"]["terminationGracePeriodSeconds"]
    pod["spec"]["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["true"]}}}
    launch = _launch(pod)
    assert (launch.grace_s, launch.engine.pre_stop_s) == (30.0, 0.0)


def test_readiness_probe_timing_comes_from_the_pod_with_kubelet_defaults() -> None:
    pod = pod_of(llama_deployment())
    engine, sidecar = pod["spec"]["containers"]
    probe = engine["readinessProbe"]
    del sidecar["readinessProbe"]
    launch = _launch(pod)
    assert launch.sidecar is not None
    assert (launch.engine.probe.timeout_s, launch.engine.probe.failure_threshold) == (
        probe["timeoutSeconds"],
        probe["failureThreshold"],
    )
    assert (launch.sidecar.probe.timeout_s, launch.sidecar.probe.failure_threshold) == (1, 3)


def test_sidecar_keeps_its_args_and_port_with_the_engine_url_on_the_pods_address() -> None:
    launch = _launch(pod_of(llama_deployment("team-a"), "llama-x-1"))
    assert launch.sidecar is not None
    argv = launch.sidecar.argv
    assert argv[:2] == (*SPECOPS, "sidecar")
    assert _flag(argv, "--engine-url") == ["http://127.200.0.1:8000"]
    assert _flag(argv, "--port") == ["9090"]
    assert _flag(argv, "--host") == ["127.200.0.1"]
    # $(POD_NAME) is expanded from the fieldRef, as the kubelet does.
    assert _flag(argv, "--pod") == ["llama-x-1"]
    assert _flag(argv, "--namespace") == ["team-a"]
    assert dict(launch.sidecar.env)["POD_NAME"] == "llama-x-1"
    assert [p.container for p in launch.processes] == ["vllm", "specops-sidecar"]


def test_sim_options_come_from_the_runner_unless_the_pod_overrides_them() -> None:
    deployment = llama_deployment()
    plain = _launch(pod_of(deployment), SimOptions("p1", "w1", 2.5)).engine.argv
    assert (_flag(plain, "--truth"), _flag(plain, "--workload")) == (["p1"], ["w1"])
    assert _flag(plain, "--startup-delay") == ["2.5"]
    annotations = {
        TRUTH_ANNOTATION: "llama3.1-8b-h200-eagle3",
        WORKLOAD_ANNOTATION: "chat",
        STARTUP_DELAY_ANNOTATION: "7",
    }
    argv = _launch(pod_of(deployment, annotations=annotations), SimOptions("p1")).engine.argv
    assert _flag(argv, "--truth") == ["llama3.1-8b-h200-eagle3"]
    assert _flag(argv, "--workload") == ["chat"]
    assert _flag(argv, "--startup-delay") == ["7.0"]


@pytest.mark.parametrize("delay", ["soon", "-1", "nan"])
def test_a_bad_startup_delay_annotation_names_the_annotation(delay: str) -> None:
    pod = pod_of(llama_deployment(), annotations={STARTUP_DELAY_ANNOTATION: delay})
    with pytest.raises(PodRunnerError, match=STARTUP_DELAY_ANNOTATION):
        _launch(pod)


def _with_engine(command: list[str], args: list[str], image: str = "vllm/vllm-openai") -> Any:
    pod = pod_of(llama_deployment())
    engine = pod["spec"]["containers"][0]
    engine.update(command=command, args=args, image=image)
    return pod


@pytest.mark.parametrize(
    ("command", "args", "port"),
    [
        (["vllm"], ["serve", "m", "--port=8001", "--speculative-config={}"], "8001"),
        (["python3", "-m", "vllm.entrypoints.openai.api_server"], ["--model", "m"], "8000"),
        ([], ["--model", "m", "--port", "8000", "--host", "0.0.0.0"], "8000"),
    ],
)
def test_every_way_of_starting_vllms_server_is_recognised(
    command: list[str], args: list[str], port: str
) -> None:
    argv = _launch(_with_engine(command, args)).engine.argv
    assert argv[:3] == (*SPECOPS, "sim", "serve")
    assert not [t for t in argv if t.startswith("--port=")]
    assert _flag(argv, "--port") == [port]
    assert _flag(argv, "--host") == ["127.200.0.1"]


def test_a_pod_without_a_vllm_server_is_refused_naming_its_containers() -> None:
    pod = _with_engine(["python"], ["app.py"], image="busybox")
    with pytest.raises(PodRunnerError, match="`vllm serve`, found none"):
        _launch(pod)


def test_two_engine_containers_are_refused() -> None:
    pod = pod_of(llama_deployment())
    twin = {**pod["spec"]["containers"][0], "name": "vllm-2"}
    pod["spec"]["containers"].append(twin)
    with pytest.raises(PodRunnerError, match="vllm, vllm-2"):
        _launch(pod)


def test_a_pod_without_sidecar_runs_the_engine_alone() -> None:
    pod = pod_of(llama_deployment())
    pod["spec"]["containers"] = pod["spec"]["containers"][:1]
    launch = _launch(pod)
    assert launch.sidecar is None
    assert launch.processes == (launch.engine,)


@pytest.mark.parametrize("ip", ["10.0.0.1", "192.168.1.7", "::ffff:10.0.0.1", "not-an-ip"])
def test_a_pod_whose_ip_is_off_loopback_is_refused_naming_it(ip: str) -> None:
    with pytest.raises(PodRunnerError, match=f"its IP {ip} is not on loopback"):
        _launch(pod_of(llama_deployment(), ip=ip))


def test_an_ipv6_loopback_pod_is_served() -> None:
    assert _launch(pod_of(llama_deployment(), ip="::1")).engine.url == "http://[::1]:8000"


def test_a_pod_without_an_ip_cannot_be_launched() -> None:
    with pytest.raises(PodRunnerError, match="no IP yet"):
        _launch(pod_of(llama_deployment(), ip=None))


def test_a_port_that_is_no_number_is_refused() -> None:
    with pytest.raises(PodRunnerError, match="'http' is not a port"):
        _launch(_with_engine(["vllm"], ["serve", "m", "--port", "http"]))


def test_an_unscheduled_pod_cannot_be_launched() -> None:
    with pytest.raises(PodRunnerError, match="a node"):
        _launch(pod_of(llama_deployment(), node=None))


def test_expansion_follows_the_kubelet() -> None:
    env = {"A": "1", "B_2": "two"}
    assert expand("$(A)-$(B_2)", env) == "1-two"
    assert expand("$(MISSING) $$(A) $$", env) == "$(MISSING) $(A) $"
    assert expand("$A $(A", env) == "$A $(A"


def test_env_resolves_values_and_field_refs_but_not_secrets() -> None:
    pod = pod_of(llama_deployment("ns"), "p-1", uid="u-9")
    pod["spec"]["containers"][0]["env"] = [
        {"name": "BASE", "value": "x"},
        {"name": "DERIVED", "value": "$(BASE)/$(LATER)"},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {
            "name": "SVC",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['specops.io/service']"}},
        },
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "LATER", "value": "y"},
    ]
    parsed = parse_pod(pod)
    assert container_env(parsed, parsed.spec.containers[0]) == {
        "BASE": "x",
        "DERIVED": "x/$(LATER)",
        "NS": "ns",
        "UID": "u-9",
        "NODE": "kwok-gpu-0",
        "SVC": "llama",
        "LATER": "y",
    }


def test_an_unreadable_pod_names_it() -> None:
    with pytest.raises(PodRunnerError, match="pod broken"):
        parse_pod({"metadata": {"name": "broken"}, "spec": {}})
