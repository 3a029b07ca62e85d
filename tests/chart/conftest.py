"""Fixtures for the chart tests: the loaded chart and a renderer bound to it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import helm_python as helm
import pytest

from .chart_render import CHART_DIR, render_objects

Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture
def render(chart: helm.Chart) -> Render:
    """``render(values, api_versions=...)`` -> the rendered objects."""
    return partial(render_objects, chart)
