"""A whole suite: every policy over every trace, then the oracle and the targets."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specops.bench._report import TraceResults, oracle
from specops.bench._run import (
    ControlledPolicy,
    FixedPolicy,
    GoodputRulePolicy,
    Policy,
    run_policy,
)
from specops.bench._spec import BenchError, BenchSuite, LoadTrace
from specops.policy import SpecConfig

__all__ = ["VLLM_DOCUMENTED_TABLE", "policies_for", "run_suite"]

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


def run_suite(
    suite: BenchSuite,
    traces: Sequence[LoadTrace],
    progress: Callable[[str], None] = lambda _: None,
) -> list[TraceResults]:
    policies = policies_for(suite)
    fixed = [p.name for p in policies if isinstance(p, FixedPolicy)]
    out = []
    for trace in traces:
        runs = {}
        for policy in policies:
            progress(f"{trace.name}: {policy.name}")
            runs[policy.name] = run_policy(trace, policy, suite.service, suite.controller)
        out.append(oracle(trace, runs, fixed))
    return out
