"""The simulated vLLM engine: one discrete-event core, driven in virtual or real time.

Stable API (the policy benchmark drives it; keep these names and meanings)::

    from specops_lab.sim import (EngineConfig, SimulatedEngine, Workload, load_truth,
                             load_workload, parse_speculative_config, run_closed_loop,
                             run_open_loop)

    engine = SimulatedEngine(
        Workload(load_workload("sharegpt"), seed=0),
        EngineConfig(max_num_seqs=256, speculative=parse_speculative_config(
            '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",'
            ' "num_speculative_tokens": 3}')),
        truth=load_truth("llama3.1-8b-h100-eagle3"),   # the default; seed=, slowdown=
    )
    engine.add_request(arrival=0.0)        # lengths and acceptance from the workload
    engine.run_until(60.0)                 # virtual seconds; idle time jumps
    engine.restart(other_config, downtime_s=90.0)   # requeue all work, serve nothing for 90 s
    engine.take_finished()                 # FinishedRequest: ttft, tpot, e2e, queue time...
    engine.metrics()                       # EngineMetrics keyed by vLLM metric names

``engine.now`` is the clock (seconds); ``step()`` runs one step and returns a StepResult
(its start and end, decode batch, k, tokens per request when ``track_tokens=True``,
finished requests). ``run_until(t, concurrency=n)`` runs a closed loop of n clients to t.
The engine never reads a clock and does no I/O: the HTTP server (``specops sim serve``)
paces ``step()`` against real time.

Steps run a stretch at a time (``stepping="bulk"``, the default: whole stretches between
the steps that need the full scheduler are planned request by request and summed with
numpy) or one by one (``"single"``); on the same seeds both give the same run
(tests/lab/sim/test_bulk_equivalence.py). ``specops sim bench-speed`` measures how far ahead of
real time one engine runs, for every truth and batch.

The engine's physics (step time, KV capacity, noise) is an ``EngineTruth`` loaded from
data (``lab/specops_lab/sim/truths/*.yaml``, see the README there), never the controller's
``PerformanceProfile``: the controller believes a profile, the engine is the world.
"""

from specops_lab.sim._drive import ClosedLoopResult, run_closed_loop, run_open_loop
from specops_lab.sim._engine import (
    EngineConfig,
    FinishedRequest,
    SimulatedEngine,
    StepResult,
    StepRule,
    k_lookup_table,
    parse_speculative_config,
)
from specops_lab.sim._exposition import render_metrics
from specops_lab.sim._jobs import default_jobs
from specops_lab.sim._metrics import EngineMetrics, HistogramSnapshot
from specops_lab.sim._truth import (
    DEFAULT_TRUTH,
    DraftTruth,
    EngineStep,
    EngineSteps,
    EngineTruth,
    TableTruth,
    TargetTruth,
    TruthSources,
    VerifyTruth,
    load_truth,
    merge_mappings,
    truth_names,
)
from specops_lab.sim._workload import (
    BUILTIN_WORKLOADS,
    DrawnRequest,
    LengthDistribution,
    MixPhase,
    ParametricComponent,
    TraceComponent,
    TraceSet,
    Workload,
    WorkloadSpec,
    load_trace_set,
    load_workload,
    replay,
)

__all__ = [
    "BUILTIN_WORKLOADS",
    "DEFAULT_TRUTH",
    "ClosedLoopResult",
    "DraftTruth",
    "DrawnRequest",
    "EngineConfig",
    "EngineMetrics",
    "EngineStep",
    "EngineSteps",
    "EngineTruth",
    "FinishedRequest",
    "HistogramSnapshot",
    "LengthDistribution",
    "MixPhase",
    "ParametricComponent",
    "SimulatedEngine",
    "StepResult",
    "StepRule",
    "TableTruth",
    "TargetTruth",
    "TraceComponent",
    "TraceSet",
    "TruthSources",
    "VerifyTruth",
    "Workload",
    "WorkloadSpec",
    "default_jobs",
    "k_lookup_table",
    "load_trace_set",
    "load_truth",
    "load_workload",
    "merge_mappings",
    "parse_speculative_config",
    "render_metrics",
    "replay",
    "run_closed_loop",
    "run_open_loop",
    "truth_names",
]
