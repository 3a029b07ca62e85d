"""The cache lives outside the repository, where the environment says."""

from __future__ import annotations

from pathlib import Path

from specops_lab.cluster._layout import CacheLayout


def test_specops_cache_wins() -> None:
    layout = CacheLayout.from_env({"SPECOPS_CACHE": "/x/c", "XDG_CACHE_HOME": "/y"})
    assert layout.root == Path("/x/c")


def test_xdg_cache_home_is_next() -> None:
    assert CacheLayout.from_env({"XDG_CACHE_HOME": "/y"}).root == Path("/y/specops")


def test_default_is_under_home() -> None:
    assert CacheLayout.from_env({}).root == Path.home() / ".cache" / "specops"


def test_builds_are_kept_per_version() -> None:
    layout = CacheLayout(Path("/c"))
    assert layout.kubernetes("v1.36.3") == Path("/c/k8s/v1.36.3")
    assert layout.kwok("v0.8.0") == Path("/c/kwok/v0.8.0")
    assert layout.kubernetes("v1.36.3") != layout.kubernetes("v1.36.4")
