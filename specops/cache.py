"""Where specops keeps what it downloads or builds once (the vLLM wheel, the control plane)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["cache_root"]


def cache_root(env: Mapping[str, str] = os.environ) -> Path:
    """``$SPECOPS_CACHE``, else ``$XDG_CACHE_HOME/specops``, else ``~/.cache/specops``."""
    if explicit := env.get("SPECOPS_CACHE"):
        return Path(explicit).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specops"
