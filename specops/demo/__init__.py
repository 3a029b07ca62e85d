"""``specops demo``: the whole loop on one machine (local control plane, chart, operator,
simulated vLLM pods, a compressed day of load), a live view and a report.

The pure parts (plan, trace, snapshot, table, report) are here for tests; the shell is
:func:`run_demo`.
"""

from specops.demo._baselines import Baseline, baseline_policies, replay_baselines
from specops.demo._errors import DemoError
from specops.demo._plan import DemoOptions, Step, demo_service, plan_steps
from specops.demo._report import EventView, Measured, RunRecord, decisions_of, markdown, plot
from specops.demo._snapshot import (
    DecisionView,
    LoadCounts,
    Snapshot,
    decision_view,
    describe_config_status,
    describe_vllm_config,
    engine_config,
    take_snapshot,
)
from specops.demo._table import render_table, summary_line
from specops.demo._trace import concurrency_at, load_demo_trace, segment_at

__all__ = [
    "Baseline",
    "DecisionView",
    "DemoError",
    "DemoOptions",
    "EventView",
    "LoadCounts",
    "Measured",
    "RunRecord",
    "Snapshot",
    "Step",
    "baseline_policies",
    "concurrency_at",
    "decision_view",
    "decisions_of",
    "demo_service",
    "describe_config_status",
    "describe_vllm_config",
    "engine_config",
    "load_demo_trace",
    "markdown",
    "plan_steps",
    "plot",
    "render_table",
    "replay_baselines",
    "segment_at",
    "summary_line",
    "take_snapshot",
]
