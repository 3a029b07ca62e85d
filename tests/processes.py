"""Real servers for integration tests: ``specops`` subcommands and Debian's Prometheus, each on
a free loopback port with its log in a test directory, tied to the pytest process and stopped
when its context ends, also when the test fails."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from specops_lab.launch import (
    free_ports,
    spawn,
    specops_executable,
    stop_process,
    wait_until_answers,
)

__all__ = ["PROMETHEUS", "running_prometheus", "running_sim_engine", "running_specops"]

PROMETHEUS = "/usr/bin/prometheus"
_LOOPBACK = "127.0.0.1"


@contextmanager
def _serving(argv: Sequence[str], ready_url: str, log: Path) -> Iterator[None]:
    process = spawn(tuple(argv), log, tie_to_parent=True)
    try:
        wait_until_answers(ready_url, process)
        yield
    finally:
        stop_process(process)


@contextmanager
def running_specops(args: Sequence[str], ready_path: str, log: Path) -> Iterator[str]:
    """``specops *args --host 127.0.0.1 --port <free port>``; yields its base URL once
    ``ready_path`` answers 200."""
    (port,) = free_ports(1)
    url = f"http://{_LOOPBACK}:{port}"
    argv = (specops_executable(), *args, "--host", _LOOPBACK, "--port", str(port))
    with _serving(argv, f"{url}{ready_path}", log):
        yield url


@contextmanager
def running_sim_engine(args: Sequence[str], log: Path) -> Iterator[str]:
    """``specops sim serve *args``; yields its base URL once it is healthy."""
    with running_specops(("sim", "serve", *args), "/health", log) as url:
        yield url


@contextmanager
def running_prometheus(
    scrape_configs: Sequence[Mapping[str, Any]], work: Path, rule_files: Sequence[Path] = ()
) -> Iterator[str]:
    """Prometheus scraping and evaluating every second, its config, log and TSDB in ``work``;
    yields its URL once ready. The TSDB is removed afterwards (tmp dirs are kept a while)."""
    if not Path(PROMETHEUS).exists():
        pytest.fail(f"{PROMETHEUS} is missing: apt-get install prometheus")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [dict(job) for job in scrape_configs],
    }
    config_file = work / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    (port,) = free_ports(1)
    url = f"http://{_LOOPBACK}:{port}"
    tsdb = work / "tsdb"
    argv = (
        PROMETHEUS,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={tsdb}",
        f"--web.listen-address={_LOOPBACK}:{port}",
    )
    try:
        with _serving(argv, f"{url}/-/ready", work / "prometheus.log"):
            yield url
    finally:
        shutil.rmtree(tsdb, ignore_errors=True)
