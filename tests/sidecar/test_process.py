"""``specops sidecar`` as a process: what it loads, and that it reads an engine and exits
cleanly.

The sidecar runs in every vLLM pod, so its resident memory is mostly the code it imports
(``sidecar/bench_sidecar.py`` measures it against the 60 MiB target). The import check
names the packages that once made most of that and that its path never uses.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.processes import running_sim_engine, running_specops

# httpx (with rich and pygments, which httpx's own command line loads when installed):
# the sidecar reads through aiohttp, whose server it runs anyway. The rest belong to other
# parts of specops (operator, Kubernetes client, simulator, plots, YAML, the vLLM wheel
# reader's subprocess tools).
NOT_LOADED = (
    "httpx",
    "httpcore",
    "rich",
    "pygments",
    "numpy",
    "matplotlib",
    "kopf",
    "kubernetes",
    "yaml",
    "specops_lab.sim",
    "specops.api",
    "specops.render",
    "specops.control",
    "specops_lab.launch",
    "specops_operator",
)


def test_the_sidecar_command_does_not_load_what_it_does_not_use() -> None:
    """Resolves ``specops sidecar`` the way the ``specops`` entry point does."""
    script = (
        "import json, sys, click\n"
        "from specops.cli import main\n"
        "assert isinstance(main.get_command(click.Context(main), 'sidecar'), click.Command)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(completed.stdout))
    assert "specops_sidecar._cli" in loaded and "aiohttp.web" in loaded
    unexpected = [name for name in NOT_LOADED if name in loaded]
    assert not unexpected, f"specops sidecar imports {unexpected}"


@pytest.mark.integration
def test_sidecar_process_reads_the_engine_and_stops_cleanly(tmp_path: Path) -> None:
    log = tmp_path / "sidecar.log"
    with running_sim_engine(["llama"], tmp_path / "engine.log") as engine:
        args = ["sidecar", "--engine-url", engine, "--scrape-interval", "0.5"]
        with running_specops(args, "/healthz", log) as sidecar:
            deadline = time.monotonic() + 30
            observation = httpx.get(f"{sidecar}/v1/observation", timeout=5).json()
            while observation["source"]["last_success"] is None and time.monotonic() < deadline:
                time.sleep(0.2)
                observation = httpx.get(f"{sidecar}/v1/observation", timeout=5).json()
            metrics = httpx.get(f"{sidecar}/metrics", timeout=5).text
    assert observation["source"]["up"] is True
    assert observation["source"]["target"] == f"{engine}/metrics"
    assert "specops_source_up{" in metrics
    text = log.read_text()
    assert "Traceback" not in text and "Unclosed" not in text, text
