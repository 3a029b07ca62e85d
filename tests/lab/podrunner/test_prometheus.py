"""file_sd targets labelled like a PodMonitor's, and a config Prometheus accepts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from specops_lab.podrunner import (
    JOB_NAME,
    PodLaunch,
    SimOptions,
    file_sd_targets,
    launch_plan,
    parse_pod,
    prometheus_config,
)

from tests.lab.podrunner.pods import llama_deployment, pod_of


def _launch(name: str, ip: str) -> PodLaunch:
    pod = pod_of(llama_deployment("ns"), name, ip=ip)
    return launch_plan(parse_pod(pod), SimOptions(), ("s",))


def test_every_process_is_a_target_at_its_pods_address_with_the_pods_labels() -> None:
    launches = [_launch("llama-b", "127.200.0.2"), _launch("llama-a", "127.200.0.1")]
    assert file_sd_targets(launches) == [
        {
            "targets": [target],
            "labels": {"namespace": "ns", "pod": pod, "service": "llama", "container": container},
        }
        for pod, container, target in [
            ("llama-a", "specops-sidecar", "127.200.0.1:9090"),
            ("llama-a", "vllm", "127.200.0.1:8000"),
            ("llama-b", "specops-sidecar", "127.200.0.2:9090"),
            ("llama-b", "vllm", "127.200.0.2:8000"),
        ]
    ]


def test_no_pods_is_an_empty_target_list() -> None:
    assert file_sd_targets([]) == []


def test_config_scrapes_the_file_at_the_interval(tmp_path: Path) -> None:
    config = yaml.safe_load(prometheus_config(tmp_path / "t.json", 0.5))
    (job,) = config["scrape_configs"]
    assert job["job_name"] == JOB_NAME
    assert job["scrape_interval"] == job["scrape_timeout"] == "500ms"
    assert job["file_sd_configs"] == [
        {"files": [str(tmp_path / "t.json")], "refresh_interval": "5s"}
    ]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs Debian's promtool")
def test_promtool_accepts_the_config(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(prometheus_config(tmp_path / "targets.json", 2.0))
    result = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_relative_target_file_is_refused() -> None:
    # Prometheus would look for it beside its config file and scrape nothing.
    with pytest.raises(ValueError, match="must be absolute"):
        prometheus_config(Path("out/demo/podrunner/prometheus/targets.json"), 2.0)
