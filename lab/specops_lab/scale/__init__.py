"""The fleet-scale benchmark: one operator, N SpeculativeServices on fake GPU nodes of the local
control plane, and what it costs the API server, in time and in memory (``specops scale``)."""

from specops_lab.scale._audit import AuditRequest, parse_audit
from specops_lab.scale._figures import ScaleFigures, ScaleTargets, Target, judge, render_table
from specops_lab.scale._run import ScaleOptions, run_scale

__all__ = [
    "AuditRequest",
    "ScaleFigures",
    "ScaleOptions",
    "ScaleTargets",
    "Target",
    "judge",
    "parse_audit",
    "render_table",
    "run_scale",
]
