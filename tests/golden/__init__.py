"""Golden files: what the renderers and the chart produce, stored to be read and diffed.

Each case renders one thing the way a user gets it: ``specops render -f`` of every example in
``examples/`` (also with ``--pod-monitor``), and the chart rendered offline as ``helm
template`` renders it with its default values, and what the Prometheus Operator's API adds
to that. ``test_golden.py`` compares each with its file under this folder; after an intended
change, ``python -m tests.golden --update`` writes them again, for the diff to be reviewed
and committed with the change.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import helm_python as helm
from click.testing import CliRunner

from specops.cli import main
from tests.chart.chart_render import CHART_DIR, MONITORING_API, render_manifests

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = Path(__file__).resolve().parent
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
UPDATE_COMMAND = ".venv/bin/python -m tests.golden --update"
# A diff longer than this is cut in the failure message; the command above shows it whole.
_DIFF_LINES = 200

__all__ = ["CASES", "UPDATE_COMMAND", "Case", "check", "diff"]


@dataclass(frozen=True)
class Case:
    """One rendering and the file that holds what it produced when last regenerated."""

    name: str
    golden: Path
    produce: Callable[[], str]


def _render_example(example: Path, *flags: str) -> Callable[[], str]:
    def produce() -> str:
        result = CliRunner().invoke(main, ["render", "-f", str(example), *flags])
        if result.exit_code != 0:
            raise RuntimeError(f"specops render -f {example} {' '.join(flags)}: {result.output}")
        return result.output

    return produce


def _render_chart(api_versions: Sequence[str] = (), *, added: bool = False) -> Callable[[], str]:
    """The chart with its default values; with ``added``, only the manifests that
    ``api_versions`` add or change against a cluster without them."""

    def produce() -> str:
        with helm.Chart.load(CHART_DIR) as chart:
            manifests = render_manifests(chart, api_versions=api_versions)
            without = render_manifests(chart) if added else {}
        # As `helm template` prints them: each non-empty manifest under its source, no NOTES.
        return "".join(
            f"---\n# Source: {path}\n{text.strip()}\n"
            for path, text in sorted(manifests.items())
            if path.endswith((".yaml", ".yml")) and text.strip() and text != without.get(path)
        )

    return produce


def _cases() -> tuple[Case, ...]:
    cases = [
        case
        for example in EXAMPLES
        for case in (
            Case(
                f"render {example.name}",
                GOLDEN_DIR / "render" / example.name,
                _render_example(example),
            ),
            Case(
                f"render {example.name} --pod-monitor",
                GOLDEN_DIR / "render" / f"{example.stem}.pod-monitor.yaml",
                _render_example(example, "--pod-monitor"),
            ),
        )
    ]
    cases.append(Case("chart defaults", GOLDEN_DIR / "chart" / "default.yaml", _render_chart()))
    # Only what the API adds: the rest is default.yaml's, and would be stored twice.
    cases.append(
        Case(
            "chart defaults, what the Prometheus Operator API adds",
            GOLDEN_DIR / "chart" / "monitoring-api.yaml",
            _render_chart(MONITORING_API, added=True),
        )
    )
    return tuple(cases)


CASES = _cases()


def diff(case: Case, produced: str) -> str:
    """A unified diff from the golden file to what ``case`` produces now; empty if equal."""
    stored = case.golden.read_text() if case.golden.exists() else ""
    lines = list(
        difflib.unified_diff(
            stored.splitlines(keepends=True),
            produced.splitlines(keepends=True),
            fromfile=f"{case.golden.relative_to(REPO)} (stored)",
            tofile=f"{case.name} (now)",
        )
    )
    if len(lines) > _DIFF_LINES:
        cut = len(lines) - _DIFF_LINES
        lines = [*lines[:_DIFF_LINES], f"... {cut} more lines of diff\n"]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def check(case: Case) -> str | None:
    """Why ``case`` no longer matches its golden file, or None when it does."""
    produced = case.produce()
    if not case.golden.exists():
        return f"{case.golden.relative_to(REPO)} is missing; write it with {UPDATE_COMMAND}"
    changes = diff(case, produced)
    if not changes:
        return None
    return (
        f"{case.name} no longer renders as {case.golden.relative_to(REPO)} says.\n"
        f"If the change is intended, regenerate the golden files with {UPDATE_COMMAND}\n"
        f"and commit them with it.\n\n{changes}"
    )
