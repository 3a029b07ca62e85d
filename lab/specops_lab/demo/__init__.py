"""``specops demo``: the whole loop on one machine (local control plane, chart, operator,
simulated vLLM pods, a compressed day of load), a live view and a report whose comparison
replays the same day in virtual time for every policy.

The pure parts (plan, trace, snapshot, table, replay, fidelity check, report) are here for
tests; the shell is :func:`run_demo`.
"""

from specops_lab.demo._errors import DemoError
from specops_lab.demo._fidelity import EngineInterval, Fidelity, StepCheck, check_steps
from specops_lab.demo._live import HeldLoad, LiveFigures, held_by_phase, phase_of, phase_spans
from specops_lab.demo._plan import DemoOptions, Step, demo_service, plan_steps
from specops_lab.demo._replay import Replay, demo_suite, replay_day, sliced
from specops_lab.demo._report import (
    EventView,
    RunRecord,
    decisions_of,
    first_paragraph,
    markdown,
    plot,
    summary_json,
)
from specops_lab.demo._snapshot import (
    CrossoverView,
    DecisionView,
    LoadCounts,
    Snapshot,
    decision_view,
    describe_config_status,
    describe_vllm_config,
    engine_config,
    take_snapshot,
)
from specops_lab.demo._table import (
    crossover_words,
    decision_line,
    load_gauge,
    render_table,
    summary_line,
)
from specops_lab.demo._trace import concurrency_at, load_demo_trace, segment_at

__all__ = [
    "CrossoverView",
    "DecisionView",
    "DemoError",
    "DemoOptions",
    "EngineInterval",
    "EventView",
    "Fidelity",
    "HeldLoad",
    "LiveFigures",
    "LoadCounts",
    "Replay",
    "RunRecord",
    "Snapshot",
    "Step",
    "StepCheck",
    "check_steps",
    "concurrency_at",
    "crossover_words",
    "decision_line",
    "decision_view",
    "decisions_of",
    "demo_service",
    "demo_suite",
    "describe_config_status",
    "describe_vllm_config",
    "engine_config",
    "first_paragraph",
    "held_by_phase",
    "load_demo_trace",
    "load_gauge",
    "markdown",
    "phase_of",
    "phase_spans",
    "plan_steps",
    "plot",
    "render_table",
    "replay_day",
    "segment_at",
    "sliced",
    "summary_json",
    "summary_line",
    "take_snapshot",
]
