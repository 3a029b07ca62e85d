"""A whole suite: every policy over every trace, then the oracle and the targets."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from specops.errors import EngineConfigError
from specops.policy import SpecConfig
from specops_lab.bench._report import TraceResults, oracle
from specops_lab.bench._run import (
    ControlledPolicy,
    FixedPolicy,
    GoodputRulePolicy,
    Policy,
    RunResult,
    engine_errors,
    initial_config,
    load_inputs,
    phased_workload,
    run_policy,
)
from specops_lab.bench._spec import BenchError, BenchSuite, LoadTrace
from specops_lab.bench._truth_table import truth_table
from specops_lab.sim import load_truth, parse_speculative_config

__all__ = [
    "VLLM_DOCUMENTED_TABLE",
    "compare_on_trace",
    "policies_for",
    "run_suite",
]

# vLLM's dynamic speculative decoding docs, Llama-3.1-8B + EAGLE-3.
VLLM_DOCUMENTED_TABLE = SpecConfig.table(
    [[1, 16, 5], [17, 32, 4], [33, 64, 3], [65, 128, 1], [129, 512, 0]]
)


def policies_for(suite: BenchSuite) -> list[Policy]:
    """Every policy of the comparison, or the suite's selection of them, by name."""
    service = suite.service
    every: list[Policy] = [
        FixedPolicy("off", SpecConfig.off()),
        *(FixedPolicy(f"k{k}", SpecConfig.static(k)) for k in range(1, service.k_max + 1)),
        FixedPolicy("vllm-table", VLLM_DOCUMENTED_TABLE),
        GoodputRulePolicy("turbospec"),
        ControlledPolicy("specops"),
    ]
    if suite.policies is None:
        return every
    known = {p.name: p for p in every}
    unknown = [name for name in suite.policies if name not in known]
    if unknown:
        raise BenchError(f"policies: unknown {unknown}; known: {sorted(known)}")
    return [known[name] for name in suite.policies]


def _truth_tables(trace: LoadTrace, suite: BenchSuite) -> list[FixedPolicy]:
    """The best table on the truth for each workload mix the trace runs (oracle baselines)."""
    service = suite.service
    _, truth, workload = load_inputs(trace, service)
    # the first segment to run each distinct mix names it
    mixes: dict[str, tuple[str, dict[str, float] | None]] = {}
    current: dict[str, float] | None = None
    for index, segment in enumerate(trace.segments):
        current = segment.mix if segment.mix is not None else current
        mixes.setdefault(json.dumps(current, sort_keys=True), (segment.name(index), current))
    many = len(mixes) > 1
    tables = []
    for label, mix in mixes.values():
        with engine_errors(f"trace {trace.name} on truth {service.truth}, the truth's table"):
            table = truth_table(
                truth,
                workload,
                service.method,
                k_max=service.k_max,
                max_batch=service.max_num_seqs,
                seed=service.seed,
                mix=mix,
            )
        tables.append(FixedPolicy(f"truth-table-{label}" if many else "truth-table", table))
    return tables


def _candidates(suite: BenchSuite, trace: LoadTrace) -> list[Policy]:
    return [*policies_for(suite), *_truth_tables(trace, suite)]


def _judge(
    trace: LoadTrace, candidates: Sequence[Policy], runs: dict[str, RunResult], suite: BenchSuite
) -> TraceResults:
    """The oracle per segment: it picks among the fixed configs, the truth's best tables and
    the per-step rule, whichever did best in hindsight (never the controller); and the plan
    of fixed configs that reacts one controller window late and pays the service's restart
    downtime a change, from the day-zero config the controller starts at."""
    pool = [p.name for p in candidates if not isinstance(p, ControlledPolicy)]
    fixed = [p for p in candidates if isinstance(p, FixedPolicy)]
    service, window_s = suite.service, suite.controller.window_s
    day_zero = initial_config(service)
    start = next((p.name for p in fixed if p.config == day_zero), None)
    return oracle(
        trace,
        runs,
        pool,
        runnable=[p.name for p in fixed],
        restart_s=service.restart_downtime_s,
        react_s=window_s,
        start=start,
    )


def compare_on_trace(
    suite: BenchSuite, trace: LoadTrace, progress: Callable[[str], None] = lambda _: None
) -> TraceResults:
    """Every policy of the suite on one trace, and the oracle per segment (see ``_judge``)."""
    runs = {}
    candidates = _candidates(suite, trace)
    for policy in candidates:
        progress(f"{trace.name}: {policy.name}")
        runs[policy.name] = run_policy(trace, policy, suite.service, suite.controller)
    return _judge(trace, candidates, runs, suite)


def _run_all(
    runs: Sequence[tuple[LoadTrace, Policy, BenchSuite]],
    progress: Callable[[str], None],
    jobs: int,
) -> list[RunResult]:
    """``run_policy`` for every (trace, policy, suite), in order; with ``jobs`` > 1 in that
    many processes (each run is independent and seeded, so the results are the same), the
    per-step rule's runs, the slowest, handed out first."""
    if jobs <= 1 or len(runs) <= 1:
        results = []
        for trace, policy, suite in runs:
            progress(f"{trace.name}: {policy.name}")
            results.append(run_policy(trace, policy, suite.service, suite.controller))
        return results
    order = sorted(range(len(runs)), key=lambda i: not isinstance(runs[i][1], GoodputRulePolicy))
    done: dict[int, RunResult] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {
            pool.submit(
                run_policy, runs[i][0], runs[i][1], runs[i][2].service, runs[i][2].controller
            ): i
            for i in order
        }
        for future in as_completed(futures):
            index = futures[future]
            done[index] = future.result()
            trace, policy, _ = runs[index]
            progress(f"{trace.name}: {policy.name} done ({len(done)}/{len(runs)})")
    return [done[i] for i in range(len(runs))]


def _truth_names(truths: Sequence[str]) -> list[str]:
    """Each truth's own name, which labels its results and plots (a truth file's path is
    no file name); two truths of one name would be one row of the report."""
    names = []
    for source in truths:
        try:
            names.append(load_truth(source).name)
        except EngineConfigError as exc:
            raise BenchError(str(exc)) from exc
    shared = sorted({name for name in names if names.count(name) > 1})
    if shared:
        raise BenchError(
            f"the suite's truths share the name {', '.join(shared)}: give each truth file "
            "a name of its own"
        )
    return names


def _check_inputs(suite: BenchSuite, traces: Sequence[LoadTrace]) -> None:
    """Before any run: what the runs would otherwise meet only once started (the service's
    speculative method, every truth, the profile, each trace's workload and its segment
    mixes), each refused naming the entry to fix."""
    service = suite.service
    vllm = {"method": service.method, "model": service.draft_model}
    try:
        parse_speculative_config(json.dumps({**vllm, "num_speculative_tokens": service.k_max}))
    except EngineConfigError as exc:
        raise BenchError(f"service.method {service.method!r}: {exc}") from exc
    for truth in suite.truth_axis:
        on_truth = service.model_copy(update={"truth": truth})
        for trace in traces:
            _, _, workload = load_inputs(trace, on_truth)
            phased_workload(workload, trace)


def run_suite(
    suite: BenchSuite,
    traces: Sequence[LoadTrace],
    progress: Callable[[str], None] = lambda _: None,
    jobs: int = 1,
) -> list[TraceResults]:
    """Every trace on every truth of the suite; with several truths a trace's results are
    named ``trace@name``, the truth's own name. Independent runs go to ``jobs`` processes."""
    truths = suite.truth_axis
    names = _truth_names(truths)
    _check_inputs(suite, traces)
    cases: list[tuple[LoadTrace, list[Policy], BenchSuite]] = []
    for truth, name in zip(truths, names, strict=True):
        on_truth = suite.model_copy(
            update={"service": suite.service.model_copy(update={"truth": truth})}
        )
        for trace in traces:
            named = trace.model_copy(update={"name": f"{trace.name}@{name}"})
            cases.append(
                (named if len(truths) > 1 else trace, _candidates(on_truth, trace), on_truth)
            )
    runs = [
        (trace, policy, on_truth) for trace, candidates, on_truth in cases for policy in candidates
    ]
    results = iter(_run_all(runs, progress, jobs))
    out = []
    for trace, candidates, on_truth in cases:
        by_name = {policy.name: next(results) for policy in candidates}
        out.append(_judge(trace, candidates, by_name, on_truth))
    return out
