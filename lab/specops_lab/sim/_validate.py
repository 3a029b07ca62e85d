"""Fidelity report: a truth measured in the simulated engine, next to published figures.

Every number is measured, not evaluated from the formula: closed loop at a fixed
concurrency (= batch) on the engine built from the truth, output-token throughput of EAGLE
with k drafts over no speculation. Per truth: the speedup by batch and k; the best k by
batch beside vLLM's documented Llama-3.1-8B + EAGLE-3 table (pass: within one k); the
best-k speedup beside the EAGLE-3 paper (pass: within 10 % at each of its batches 2-64);
and the crossover per k (the smallest batch where k loses to no speculation) at several
context lengths. Each measurement sees hundreds of requests finish, so the acceptance it
runs at is the workload's (reported beside each best k), not that of a seed's first draws.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from specops_lab.sim._engine import EngineConfig, SimulatedEngine, parse_speculative_config
from specops_lab.sim._truth import EngineTruth, load_truth, truth_names
from specops_lab.sim._workload import (
    LengthDistribution,
    ParametricComponent,
    Workload,
    WorkloadSpec,
    load_workload,
)

__all__ = [
    "BATCHES",
    "CONTEXTS",
    "CONTEXT_BATCHES",
    "CONTEXT_MIN_REQUESTS",
    "EAGLE3_PAPER",
    "KS",
    "MIN_REQUESTS",
    "VLLM_TABLE",
    "Check",
    "SpeedupTable",
    "TruthValidation",
    "context_workload",
    "documented_k",
    "eagle3_paper_checks",
    "load_truths",
    "measure_speedups",
    "render_markdown",
    "validate_truth",
    "vllm_table_checks",
    "write_report",
]

BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 56, 64, 96, 128, 160, 192, 256)
KS: tuple[int, ...] = (1, 2, 3, 4, 5)
CONTEXTS: tuple[int, ...] = (1024, 4096, 16384)
CONTEXT_BATCHES: tuple[int, ...] = (32, 64, 128, 192, 256)

# vLLM's dynamic speculative decoding docs, Llama-3.1-8B + EAGLE-3: (first, last batch, k).
VLLM_TABLE: tuple[tuple[int, int, int], ...] = (
    (1, 16, 5),
    (17, 32, 4),
    (33, 64, 3),
    (65, 128, 1),
    (129, 512, 0),
)
# EAGLE-3 paper (arXiv 2503.01840), SGLang, one H100, Llama-3.1-8B, MT-Bench.
EAGLE3_PAPER: dict[int, float] = {
    2: 1.81,
    4: 1.82,
    8: 1.62,
    16: 1.48,
    24: 1.39,
    32: 1.32,
    48: 1.38,
    56: 1.34,
    64: 1.38,
}
PAPER_TOLERANCE = 0.10

# Conditional acceptance per draft position that gives the sharegpt trace set's mean
# tokens per step (1.647, 2.037, 2.278, 2.436, 2.542 for k = 1..5): the context sweep's.
_SHAREGPT_CONDITIONAL = (0.647, 0.603, 0.618, 0.656, 0.671)
_CONTEXT_OUTPUT = 512

# Requests each measurement of the workload sees finish, at least: six times the sharegpt
# trace set's 310, so the acceptance measured is the workload's. A seed's first few dozen
# draws are no sample of it: at two requests per slot (32-96 requests) batches 16-48 ran
# 8 % above it. Here a speedup moves by about 1 % from seed to seed (2 % at 640 requests).
MIN_REQUESTS = 2000
# The context sweep's requests draw their acceptance position by position: a few suffice.
CONTEXT_MIN_REQUESTS = 16
# Simulated seconds a closed loop runs between looks at what finished.
_SLICE_S = 0.5


def documented_k(batch: int) -> int:
    """The k vLLM's documented 8B + EAGLE-3 table runs at ``batch``."""
    return next(k for first, last, k in VLLM_TABLE if first <= batch <= last)


@dataclass(frozen=True)
class SpeedupTable:
    """Throughput speedup of EAGLE with k drafts over no speculation, per batch."""

    truth: str
    workload: str
    speedup: dict[int, dict[int, float]]
    acceptance_length: dict[int, dict[int, float]]
    """Per batch and k: tokens per request per step in the measured window (1 + accepted /
    drafts, as vLLM's metric has it)."""

    def best_k(self, batch: int) -> int:
        """The k with the highest speedup, or 0 when none beats no speculation."""
        row = self.speedup[batch]
        k = max(row, key=row.__getitem__)
        return k if row[k] > 1.0 else 0

    def best_speedup(self, batch: int) -> float:
        return max(1.0, *self.speedup[batch].values())

    def crossover(self, k: int) -> int | None:
        """The smallest measured batch where k drafts lose to none (None: never here)."""
        return next((b for b, row in self.speedup.items() if row[k] < 1.0), None)


@dataclass(frozen=True)
class Check:
    """One published figure beside what the engine measured at the same batch."""

    source: str
    batch: int
    published: float
    measured: float
    passed: bool


def vllm_table_checks(table: SpeedupTable) -> tuple[Check, ...]:
    """Best k beside vLLM's documented table at every measured batch: pass within one k."""
    return tuple(
        Check("vLLM table", b, documented_k(b), best, abs(best - documented_k(b)) <= 1)
        for b in table.speedup
        for best in (table.best_k(b),)
    )


def eagle3_paper_checks(table: SpeedupTable) -> tuple[Check, ...]:
    """Best-k speedup beside the EAGLE-3 paper at each of its batches measured: pass within
    10 %."""
    return tuple(
        Check("EAGLE-3 paper", b, paper, best, abs(best / paper - 1) <= PAPER_TOLERANCE)
        for b, paper in EAGLE3_PAPER.items()
        if b in table.speedup
        for best in (table.best_speedup(b),)
    )


@dataclass(frozen=True)
class TruthValidation:
    """One truth: speedups on the workload, and by context length for the crossover."""

    truth: EngineTruth
    table: SpeedupTable
    by_context: dict[int, SpeedupTable]


def _throughput(
    truth: EngineTruth,
    workload: WorkloadSpec,
    batch: int,
    k: int | None,
    requests: int,
    seed: int,
) -> tuple[float, float]:
    """Output tokens per second while ``requests`` finish, after ``batch`` have (warm-up).

    A closed loop at ``batch`` run a slice of simulated time at a time, so the engine
    steps in stretches: a measurement of a few hundred requests costs what a benchmark's
    does. The window opens and closes at a slice's end, its tokens and time both counted.
    """
    spec = None
    if k is not None:
        spec = json.dumps({"method": "eagle", "model": "eagle-head", "num_speculative_tokens": k})
    engine = SimulatedEngine(
        Workload(workload, seed=seed),
        EngineConfig(max_num_seqs=batch, speculative=parse_speculative_config(spec)),
        truth=truth,
        seed=seed,
    )
    finished = 0

    def run_until_finished(count: int) -> None:
        nonlocal finished
        while finished < count:
            # run_until refills after every step but its last: a request that finished in
            # the slice's last step is replaced here.
            for _ in range(batch - engine.num_running - engine.num_waiting):
                engine.add_request()
            engine.run_until(engine.now + _SLICE_S, concurrency=batch)
            finished += len(engine.take_finished())

    names = (
        "vllm:generation_tokens",
        "vllm:spec_decode_num_drafts",
        "vllm:spec_decode_num_accepted_tokens",
    )
    run_until_finished(batch)
    start, before = engine.now, [engine.metrics().counters[name] for name in names]
    run_until_finished(batch + requests)
    tokens, drafts, accepted = (
        engine.metrics().counters[name] - count for name, count in zip(names, before, strict=True)
    )
    return tokens / (engine.now - start), 1.0 + accepted / drafts if drafts else float("nan")


def measure_speedups(
    *,
    truth: EngineTruth,
    workload: str | WorkloadSpec = "sharegpt",
    batches: Sequence[int] = BATCHES,
    ks: Sequence[int] = KS,
    requests_per_slot: int = 2,
    min_requests: int = MIN_REQUESTS,
    seed: int = 0,
    jobs: int = 1,
) -> SpeedupTable:
    """Closed loop at each batch: ``max(min_requests, requests_per_slot * batch)`` measured.

    Each (batch, k) is its own seeded run, so ``jobs`` processes measure the same table;
    the largest batches, the slowest, are handed out first.
    """
    spec = load_workload(workload) if isinstance(workload, str) else workload
    cells = sorted(
        ((batch, k) for batch in batches for k in (None, *ks)), key=lambda cell: -cell[0]
    )
    runs = [
        (truth, spec, batch, k, max(min_requests, requests_per_slot * batch), seed)
        for batch, k in cells
    ]
    if jobs > 1 and len(runs) > 1:
        with ProcessPoolExecutor(min(jobs, len(runs))) as pool:
            measured = dict(zip(cells, pool.map(_measure, runs), strict=True))
    else:
        measured = dict(zip(cells, map(_measure, runs), strict=True))
    speedup: dict[int, dict[int, float]] = {}
    acceptance: dict[int, dict[int, float]] = {}
    for batch in batches:
        base, _ = measured[batch, None]
        speedup[batch] = {k: measured[batch, k][0] / base for k in ks}
        acceptance[batch] = {k: measured[batch, k][1] for k in ks}
    return SpeedupTable(truth.name, spec.name, speedup, acceptance)


def _measure(
    run: tuple[EngineTruth, WorkloadSpec, int, int | None, int, int],
) -> tuple[float, float]:
    return _throughput(*run)


def context_workload(context: int) -> WorkloadSpec:
    """Requests whose mean context is about ``context`` tokens, with sharegpt's acceptance."""
    prompt = max(1, context - _CONTEXT_OUTPUT // 2)
    component = ParametricComponent(
        network=_SHAREGPT_CONDITIONAL,
        prompt_len=LengthDistribution(mean=prompt),
        output_len=LengthDistribution(mean=_CONTEXT_OUTPUT),
    )
    return WorkloadSpec(name=f"context-{context}", components={"context": component})


def validate_truth(
    truth: EngineTruth,
    *,
    workload: str = "sharegpt",
    batches: Sequence[int] = BATCHES,
    contexts: Sequence[int] = CONTEXTS,
    context_batches: Sequence[int] = CONTEXT_BATCHES,
    ks: Sequence[int] = KS,
    requests_per_slot: int = 2,
    min_requests: int = MIN_REQUESTS,
    context_min_requests: int = CONTEXT_MIN_REQUESTS,
    seed: int = 0,
    jobs: int = 1,
) -> TruthValidation:
    """Every measurement of the report for one truth, in ``jobs`` processes."""
    table = measure_speedups(
        truth=truth,
        workload=workload,
        batches=batches,
        ks=ks,
        requests_per_slot=requests_per_slot,
        min_requests=min_requests,
        seed=seed,
        jobs=jobs,
    )
    by_context = {
        context: measure_speedups(
            truth=truth,
            workload=context_workload(context),
            batches=context_batches,
            ks=ks,
            requests_per_slot=requests_per_slot,
            min_requests=context_min_requests,
            seed=seed,
            jobs=jobs,
        )
        for context in contexts
    }
    return TruthValidation(truth, table, by_context)


def _verdict(ok: bool) -> str:
    return "pass" if ok else "FAIL"


def _summary(source: str, checks: Iterable[Check]) -> str:
    checks = list(checks)
    failed = [str(check.batch) for check in checks if not check.passed]
    passed = f"{source} {len(checks) - len(failed)}/{len(checks)} pass"
    return passed + (f" (FAIL at batch {', '.join(failed)})" if failed else "")


def render_markdown(validation: TruthValidation) -> str:
    table = validation.table
    sources = validation.truth.sources
    ks = sorted(next(iter(table.speedup.values())))
    lines = [
        f"## truth: {table.truth} ({table.workload})",
        "",
        validation.truth.description,
        "",
        "Fitted to: " + "; ".join(sources.fitted_to) + ".",
    ]
    if sources.compared_with:
        lines.append("Compared with: " + "; ".join(sources.compared_with) + ".")
    table_checks = {check.batch: check for check in vllm_table_checks(table)}
    paper_checks = {check.batch: check for check in eagle3_paper_checks(table)}
    lines += [
        "",
        "Output-token throughput over no speculation, measured in the engine, closed loop "
        f"at concurrency = batch, at the {table.workload} workload's acceptance (tokens per "
        "request per step of the best k beside it; the EAGLE-3 paper ran EAGLE-3 on "
        "MT-Bench). Best k beside vLLM's documented 8B + EAGLE-3 table (pass: within one "
        "k); best-k speedup beside the EAGLE-3 paper (pass: within 10 %).",
        "",
        "| batch | " + " | ".join(f"k={k}" for k in ks) + " | best k | tokens/step | vLLM "
        "table | ±1 | best speedup | EAGLE-3 paper | ±10 % |",
        "|---|" + "---|" * len(ks) + "---|---|---|---|---|---|---|",
    ]
    for batch, row in table.speedup.items():
        cells = " | ".join(f"{row[k]:.2f}" for k in ks)
        best = table.best_k(batch)
        length = table.acceptance_length[batch][best] if best else 1.0
        documented = table_checks[batch]
        paper = paper_checks.get(batch)
        paper_cells = (
            f"{paper.published:.2f} | {paper.measured / paper.published - 1:+.0%} "
            f"{_verdict(paper.passed)}"
            if paper is not None
            else " | "
        )
        lines.append(
            f"| {batch} | {cells} | {best} | {length:.2f} | {documented.published:.0f} | "
            f"{_verdict(documented.passed)} | {table.best_speedup(batch):.2f} | {paper_cells} |"
        )
    lengths = {
        k: sum(by_k[k] for by_k in table.acceptance_length.values()) / len(table.speedup)
        for k in ks
    }
    lines += [
        "",
        "Checks: "
        + "; ".join(
            _summary(source, checks)
            for source, checks in (
                ("vLLM table", table_checks.values()),
                ("EAGLE-3 paper", paper_checks.values()),
            )
        )
        + ".",
        "",
        "Tokens per request per step measured, mean over the batches: "
        + ", ".join(f"k={k}: {lengths[k]:.3f}" for k in ks)
        + ".",
        "",
        "Crossover per k by mean context (the smallest batch where k drafts lose to none; "
        "> N: not up to the largest batch N measured), parametric requests with sharegpt's "
        "acceptance:",
        "",
        "| context | " + " | ".join(f"k={k}" for k in ks) + " |",
        "|---|" + "---|" * len(ks),
    ]
    for context, by_context in validation.by_context.items():
        last = max(by_context.speedup)
        cells = " | ".join(
            str(cross) if (cross := by_context.crossover(k)) is not None else f"> {last}"
            for k in ks
        )
        lines.append(f"| {context} | {cells} |")
    lines.append("")
    return "\n".join(lines)


def write_report(validations: Sequence[TruthValidation], directory: Path) -> list[Path]:
    """``validation.md`` (every truth) and ``validation-<truth>.png`` into ``directory``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    markdown = directory / "validation.md"
    markdown.write_text(
        "# Simulated EAGLE speedup over no speculation, per truth\n\n"
        + "\n".join(render_markdown(v) for v in validations),
        encoding="utf-8",
    )
    written = [markdown]
    for validation in validations:
        table = validation.table
        figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
        batches = list(table.speedup)
        ks = sorted(next(iter(table.speedup.values())))
        for k in ks:
            left.plot(batches, [table.speedup[b][k] for b in batches], marker="o", label=f"k={k}")
        paper = sorted(EAGLE3_PAPER.items())
        left.plot(*zip(*paper, strict=True), "k--", marker="s", label="EAGLE-3 paper")
        left.axhline(1.0, color="grey", linewidth=0.8)
        left.set_xscale("log", base=2)
        left.set_xlabel("batch (concurrent requests)")
        left.set_ylabel("speedup over no speculation")
        left.set_title(f"truth: {table.truth}, {table.workload}")
        left.legend(fontsize="small")
        for context, by_context in validation.by_context.items():
            cbatches = list(by_context.speedup)
            right.plot(
                cbatches,
                [by_context.speedup[b][max(ks) // 2 + 1] for b in cbatches],
                marker="o",
                label=f"context {context}",
            )
        right.axhline(1.0, color="grey", linewidth=0.8)
        right.set_xscale("log", base=2)
        right.set_xlabel("batch (concurrent requests)")
        right.set_ylabel(f"speedup of k={max(ks) // 2 + 1}")
        right.set_title(f"truth: {table.truth}, by context length")
        if validation.by_context:
            right.legend(fontsize="small")
        figure.tight_layout()
        png = directory / f"validation-{table.truth}.png"
        figure.savefig(png, dpi=110)
        plt.close(figure)
        written.append(png)
    return written


def load_truths(names: Sequence[str]) -> list[EngineTruth]:
    """Truths by shipped name or file; ``all`` stands for every shipped truth."""
    expanded = [n for name in names for n in (truth_names() if name == "all" else (name,))]
    return [load_truth(name) for name in dict.fromkeys(expanded)]
