"""The product installs and runs without the lab: a fresh venv gets the product's distribution
and its dependencies only (from the wheels scripts/bootstrap caches, no index reached), holds
no module of the lab, imports every module of the operator, the sidecar and the packages they
use, and starts the sidecar; a lab command says what to install."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from specops_lab.launch import free_ports

from specops.cache import cache_root

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WHEELS = cache_root() / "wheels" / "core"
# What runs in a customer's cluster: the operator, the sidecar, and what they import.
PRODUCT = (
    "specops_operator",
    "specops_sidecar",
    "specops.api",
    "specops.render",
    "specops.policy",
    "specops.control",
    "specops.observation",
    "specops.profiles",
    "specops.vllm",
)
LAB_ONLY = ("numpy", "matplotlib", "rich", "helm-python-sdk", "grafana-foundation-sdk")
_FIND_LAB = "import importlib.util; print(importlib.util.find_spec('specops_lab'))"

_IMPORT_ALL = """
import importlib, pkgutil, sys
for name in sys.argv[1:]:
    package = importlib.import_module(name)
    for info in pkgutil.walk_packages(package.__path__, name + "."):
        importlib.import_module(info.name)
print("imported")
"""


def _run(*argv: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (WHEELS / ".requirements").is_file():
        pytest.fail(f"no cached wheels in {WHEELS}: run scripts/bootstrap")
    venv = tmp_path_factory.mktemp("core") / "venv"
    assert _run(sys.executable, "-m", "venv", venv).returncode == 0
    # pip's check for a newer pip would ask the package index: nothing here reaches off loopback.
    pip = (
        *(venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check"),
        *("--no-index", "--find-links", WHEELS),
    )
    for step in (("hatchling",), ("--no-build-isolation", REPO)):
        done = _run(*pip, *step)
        assert done.returncode == 0, done.stderr
    return venv


def test_the_core_install_has_none_of_the_lab(core_venv: Path) -> None:
    listed = _run(
        core_venv / "bin" / "pip", "list", "--format=freeze", "--disable-pip-version-check"
    ).stdout.lower()
    installed = {line.split("==")[0] for line in listed.splitlines()}
    assert "specops" in installed
    assert "specops-lab" not in installed
    assert not installed & {name.lower() for name in LAB_ONLY}
    required = importlib.metadata.requires("specops") or []
    assert all("extra ==" in r for r in required if r.split(">")[0] in LAB_ONLY)
    assert _run(core_venv / "bin" / "python", "-c", _FIND_LAB).stdout.strip() == "None"
    size = sum(f.stat().st_size for f in (core_venv / "lib").rglob("*") if f.is_file())
    print(f"core install: {size / 2**20:.0f} MiB of site-packages")


def test_every_product_module_imports_from_the_core(core_venv: Path) -> None:
    done = _run(core_venv / "bin" / "python", "-c", _IMPORT_ALL, *PRODUCT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported"


def test_the_operator_parses_and_the_sidecar_serves_from_the_core(core_venv: Path) -> None:
    specops = core_venv / "bin" / "specops"
    assert _run(specops, "operator", "--help").returncode == 0
    engine_port, port = free_ports(2)
    argv: list[str | Path] = [specops, "sidecar", "--engine-url", f"http://127.0.0.1:{engine_port}"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--pod", "p", "--service", "s"]
    sidecar = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert sidecar.stderr is not None  # piped
    try:
        answered = None
        deadline = time.monotonic() + 60
        while answered is None and time.monotonic() < deadline and sidecar.poll() is None:
            try:
                answered = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code
            except httpx.TransportError:
                time.sleep(0.2)
        assert answered == 200, sidecar.stderr.read() if sidecar.poll() is not None else answered
    finally:
        sidecar.terminate()
        sidecar.wait(timeout=30)


def test_a_lab_command_names_what_to_install(core_venv: Path) -> None:
    done = _run(core_venv / "bin" / "specops", "sim", "serve", "--help")
    assert done.returncode != 0
    assert "needs specops_lab" in done.stderr
    assert "pip install specops-lab" in done.stderr


def test_a_generator_names_the_extra_it_needs(core_venv: Path) -> None:
    done = _run(core_venv / "bin" / "specops", "dashboards", "--help")
    assert done.returncode != 0
    assert "pip install 'specops[dashboards]'" in done.stderr
