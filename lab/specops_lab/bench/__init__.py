"""The policy benchmark: every speculation policy over load traces, on the simulated engine."""

from specops_lab.bench._report import (
    ORACLE,
    Summary,
    TargetResult,
    TraceResults,
    evaluate_targets,
    markdown,
    oracle,
    results_json,
    summarize,
)
from specops_lab.bench._run import (
    ControlledPolicy,
    DecisionRecord,
    FixedPolicy,
    GoodputRulePolicy,
    Policy,
    RunResult,
    SegmentStats,
    run_policy,
)
from specops_lab.bench._spec import (
    BenchError,
    BenchSuite,
    ControllerSpec,
    LoadTrace,
    Segment,
    ServiceSpec,
    TraceEntry,
    load_suite,
)
from specops_lab.bench._suite import (
    VLLM_DOCUMENTED_TABLE,
    compare_on_trace,
    policies_for,
    run_suite,
)
from specops_lab.bench._turbospec import GoodputRule

__all__ = [
    "ORACLE",
    "VLLM_DOCUMENTED_TABLE",
    "BenchError",
    "BenchSuite",
    "ControlledPolicy",
    "ControllerSpec",
    "DecisionRecord",
    "FixedPolicy",
    "GoodputRule",
    "GoodputRulePolicy",
    "LoadTrace",
    "Policy",
    "RunResult",
    "Segment",
    "SegmentStats",
    "ServiceSpec",
    "Summary",
    "TargetResult",
    "TraceEntry",
    "TraceResults",
    "compare_on_trace",
    "evaluate_targets",
    "load_suite",
    "markdown",
    "oracle",
    "policies_for",
    "results_json",
    "run_policy",
    "run_suite",
    "summarize",
]
