"""The vLLM wheel and the control-plane builds live under one cache root, however it is set."""

from pathlib import Path

import pytest
from specops_lab.cluster import CacheLayout

from specops.vllm._release import _cache_dir


@pytest.mark.parametrize(
    ("env", "root"),
    [
        ({"SPECOPS_CACHE": "/srv/cache"}, Path("/srv/cache")),
        ({"XDG_CACHE_HOME": "/var/xdg"}, Path("/var/xdg/specops")),
        ({}, Path.home() / ".cache" / "specops"),
    ],
)
def test_one_cache_root(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], root: Path) -> None:
    for name in ("SPECOPS_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert CacheLayout.from_env().root == root
    assert _cache_dir() == root / "vllm"
