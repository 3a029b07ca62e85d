"""What Prometheus sees of the local pods: a file_sd target list and a config that reads it.

Each target is one process (engine or sidecar) at its pod's IP and port, labelled with the
pod's namespace and name, its SpeculativeService and the container it stands in for, the
labels a PodMonitor would give it in a real cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from specops.render import PODS_JOB
from specops_lab.podrunner._translate import PodLaunch

__all__ = ["JOB_NAME", "file_sd_targets", "prometheus_config"]

# The job the operator's PodMonitor gives the pods, which the alerts and dashboards select.
JOB_NAME = PODS_JOB


def file_sd_targets(launches: Iterable[PodLaunch]) -> list[dict[str, Any]]:
    """The file_sd JSON document: one target group per process, in a stable order."""
    groups = [
        {
            "targets": [process.address],
            "labels": {
                "namespace": launch.key.namespace,
                "pod": launch.key.name,
                "service": launch.service,
                "container": process.container,
            },
        }
        for launch in launches
        for process in launch.processes
    ]
    return sorted(groups, key=lambda g: tuple(g["labels"].values()))


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def prometheus_config(file_sd_path: Path, scrape_interval_s: float) -> str:
    """prometheus.yml scraping every target in ``file_sd_path`` every ``scrape_interval_s``.

    The path must be absolute: Prometheus resolves a relative one against the folder of
    its config file, not its working directory, and would then find no targets at all.
    """
    if not file_sd_path.is_absolute():
        raise ValueError(f"the file_sd path must be absolute, got {file_sd_path}")
    interval = _duration(scrape_interval_s)
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {
                "job_name": JOB_NAME,
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "file_sd_configs": [{"files": [str(file_sd_path)], "refresh_interval": "5s"}],
            }
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)
