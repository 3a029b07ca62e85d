"""Which pod-address blocks the clusters under one cache hold, as a new cluster sees them."""

from __future__ import annotations

import os
from pathlib import Path

from specops_lab.cluster._cluster import ClusterOptions, LocalCluster, _Process, _State
from specops_lab.cluster._layout import CacheLayout


def _write_state(layout: CacheLayout, name: str, block: int, processes: list[_Process]) -> None:
    run = layout.run(name)
    run.mkdir(parents=True)
    state = _State(
        name=name, server="https://127.0.0.1:1", kubeconfig="", ports={}, pod_block=block
    )
    state.processes = processes
    (run / "state.json").write_text(state.model_dump_json())


def test_a_new_cluster_skips_the_blocks_of_running_and_starting_clusters(tmp_path: Path) -> None:
    layout = CacheLayout(tmp_path)
    argv0 = Path("/proc/self/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    alive = _Process(name="etcd", pid=os.getpid(), executable=argv0, log="")
    dead = _Process(name="etcd", pid=2**22 + 1, executable="/nonexistent/etcd", log="")
    _write_state(layout, "running", 0, [alive])
    _write_state(layout, "killed", 1, [dead])
    _write_state(layout, "starting", 2, [])
    cluster = LocalCluster(ClusterOptions(name="new"), layout=layout)
    with cluster._pod_blocks_locked() as held:
        assert held == {0, 2}
