"""Fidelity report: simulated EAGLE speedup over no speculation, next to published figures."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specops.profiles import get_profile
from specops.sim._drive import run_closed_loop
from specops.sim._engine import EngineConfig, SimulatedEngine, parse_speculative_config
from specops.sim._workload import Workload, load_workload

__all__ = [
    "BATCHES",
    "KS",
    "PUBLISHED",
    "SpeedupTable",
    "measure_speedups",
    "write_report",
]

BATCHES: tuple[int, ...] = (1, 8, 32, 64, 128, 256)
KS: tuple[int, ...] = (1, 3, 5)

# specops/sim/traces/README.md, by the batch the simulation runs.
PUBLISHED: dict[int, str] = {
    1: "EAGLE-3 1.81, EAGLE-1 1.40 (batch 2); vLLM docs: k=5",
    8: "EAGLE-3 1.62, EAGLE-1 1.23; vLLM docs: k=5",
    32: "EAGLE-3 1.32, EAGLE-1 0.94; vLLM docs: k=4",
    64: "EAGLE-3 1.38, EAGLE-1 0.99; vLLM docs: k=3",
    128: "vLLM docs: k=1 (65-128)",
    256: "vLLM docs: k=0 (129-512); DSpark: every k < none at 256",
}


@dataclass(frozen=True)
class SpeedupTable:
    """Throughput speedup of EAGLE with k drafts over no speculation, per batch."""

    profile: str
    workload: str
    speedup: dict[int, dict[int, float]]
    acceptance_length: dict[int, float]

    def best_k(self, batch: int) -> int:
        """The k with the highest speedup, or 0 when none beats no speculation."""
        row = self.speedup[batch]
        k = max(row, key=row.__getitem__)
        return k if row[k] > 1.0 else 0


def _throughput(
    profile: str, workload: str, batch: int, k: int | None, requests: int, seed: int
) -> tuple[float, float]:
    spec = None
    if k is not None:
        spec = json.dumps({"method": "eagle", "model": "eagle-head", "num_speculative_tokens": k})
    engine = SimulatedEngine(
        get_profile(profile),
        Workload(load_workload(workload), seed=seed),
        EngineConfig(max_num_seqs=batch, speculative=parse_speculative_config(spec)),
    )
    result = run_closed_loop(engine, batch, requests=requests + batch, warmup_requests=batch)
    return result.throughput, engine.metrics().mean_acceptance_length


def measure_speedups(
    *,
    profile: str = "llama3.1-8b-h100",
    workload: str = "sharegpt",
    batches: Sequence[int] = BATCHES,
    ks: Sequence[int] = KS,
    requests_per_slot: int = 3,
    min_requests: int = 40,
    seed: int = 0,
) -> SpeedupTable:
    """Closed loop at each batch: ``max(min_requests, requests_per_slot * batch)`` measured."""
    speedup: dict[int, dict[int, float]] = {}
    acceptance: dict[int, float] = {}
    for batch in batches:
        requests = max(min_requests, requests_per_slot * batch)
        base, _ = _throughput(profile, workload, batch, None, requests, seed)
        speedup[batch] = {}
        for k in ks:
            throughput, length = _throughput(profile, workload, batch, k, requests, seed)
            speedup[batch][k] = throughput / base
            acceptance[k] = length
    return SpeedupTable(profile, workload, speedup, acceptance)


def render_markdown(table: SpeedupTable) -> str:
    ks = sorted(next(iter(table.speedup.values())))
    lines = [
        f"# Simulated EAGLE speedup over no speculation ({table.profile}, {table.workload})",
        "",
        "Output-token throughput ratio, closed loop at fixed concurrency = batch.",
        "",
        "| batch | " + " | ".join(f"k={k}" for k in ks) + " | best k (sim) | published |",
        "|---|" + "---|" * len(ks) + "---|---|",
    ]
    for batch, row in table.speedup.items():
        cells = " | ".join(f"{row[k]:.2f}" for k in ks)
        lines.append(f"| {batch} | {cells} | {table.best_k(batch)} | {PUBLISHED.get(batch, '')} |")
    lines += [
        "",
        "Mean acceptance length the metrics reported: "
        + ", ".join(f"k={k}: {table.acceptance_length[k]:.3f}" for k in ks)
        + ".",
        "",
        "Published: EAGLE-3 paper (SGLang, one H100, Llama-3.1-8B, MT-Bench); vLLM dynamic "
        "speculative decoding docs (Llama-3.1-8B + EAGLE-3 schedule); vLLM DSpark blog.",
        "",
    ]
    return "\n".join(lines)


def write_report(table: SpeedupTable, directory: Path) -> tuple[Path, Path]:
    """Write ``validation.md`` and ``validation.png`` into ``directory``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    markdown = directory / "validation.md"
    markdown.write_text(render_markdown(table), encoding="utf-8")
    figure, axes = plt.subplots(figsize=(7, 4.5))
    batches = list(table.speedup)
    for k in sorted(next(iter(table.speedup.values()))):
        axes.plot(batches, [table.speedup[b][k] for b in batches], marker="o", label=f"sim k={k}")
    axes.plot([2, 8, 32, 64], [1.81, 1.62, 1.32, 1.38], "k--", marker="s", label="EAGLE-3 paper")
    axes.plot([2, 8, 32, 64], [1.40, 1.23, 0.94, 0.99], "k:", marker="^", label="EAGLE-1 paper")
    axes.axhline(1.0, color="grey", linewidth=0.8)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("batch (concurrent requests)")
    axes.set_ylabel("speedup over no speculation")
    axes.set_title(f"{table.profile}, {table.workload}")
    axes.legend()
    figure.tight_layout()
    png = directory / "validation.png"
    figure.savefig(png, dpi=120)
    plt.close(figure)
    return markdown, png
