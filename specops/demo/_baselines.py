"""The comparison the report needs: the same day replayed on the simulated engine in virtual
time with no speculation and with the static k a user would have set, using the
benchmark's service definition with the demo's profile and workload."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specops.bench import (
    BenchError,
    FixedPolicy,
    LoadTrace,
    Policy,
    RunResult,
    Summary,
    load_suite,
    run_policy,
    summarize,
)
from specops.demo._errors import DemoError
from specops.demo._plan import DemoOptions
from specops.policy import SpecConfig

__all__ = ["BENCH_SUITE", "Baseline", "baseline_policies", "replay_baselines"]

BENCH_SUITE = Path(__file__).resolve().parents[2] / "bench" / "full.yaml"


@dataclass(frozen=True)
class Baseline:
    """One policy's replay: its figures and its timeline of (time, running, k)."""

    name: str
    summary: Summary
    run: RunResult


def baseline_policies(static_k: int) -> tuple[Policy, ...]:
    return (
        FixedPolicy("off", SpecConfig.off()),
        FixedPolicy(f"static k={static_k}", SpecConfig.static(static_k)),
    )


def replay_baselines(
    trace: LoadTrace,
    options: DemoOptions,
    *,
    static_k: int,
    k_max: int,
    max_num_seqs: int,
    suite_path: Path = BENCH_SUITE,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[Baseline, ...]:
    """Each baseline policy over ``trace`` in virtual time (seconds of compute each)."""
    try:
        suite, _ = load_suite(suite_path)
    except BenchError as exc:
        raise DemoError(f"the simulated baselines need the benchmark suite: {exc}") from exc
    service = suite.service.model_copy(
        update={
            "profile": options.profile,
            "truth": options.truth,
            "k_max": k_max,
            "max_num_seqs": max_num_seqs,
        }
    )
    replayed = trace.model_copy(update={"workload": options.workload})
    out = []
    for policy in baseline_policies(static_k):
        progress(f"replaying {trace.name} with {policy.name}")
        try:
            run = run_policy(replayed, policy, service, suite.controller)
        except BenchError as exc:
            raise DemoError(f"simulated baseline {policy.name}: {exc}") from exc
        out.append(Baseline(policy.name, summarize(run.segments, run.restarts), run))
    return tuple(out)
