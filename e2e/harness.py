"""Types of the e2e fixtures, for test modules to import (two conftest.py files would clash)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

__all__ = ["Kubectl", "Wait"]

Wait = Callable[[Callable[[], bool], str], None]
Kubectl = Callable[..., subprocess.CompletedProcess[str]]
