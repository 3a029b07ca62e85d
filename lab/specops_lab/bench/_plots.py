"""PNG plots of a benchmark: k and load over time per trace, TPOT against concurrency."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from specops_lab.bench._report import TraceResults

__all__ = ["plot_all"]

# Policies whose k moves during a run; the static ones are flat lines not worth a plot.
_MOVING = ("specops", "turbospec", "vllm-table")


def _k_and_load(results: TraceResults, path: Path) -> None:
    fig, (load_ax, k_ax) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    shown = [p for p in _MOVING if p in results.runs]
    for policy in shown:
        timeline = np.asarray(results.runs[policy].timeline, dtype=float)
        if timeline.size == 0:
            continue
        load_ax.plot(timeline[:, 0], timeline[:, 1], label=policy, linewidth=0.8)
        k_ax.step(timeline[:, 0], timeline[:, 2], where="post", label=policy, linewidth=0.8)
    load_ax.set_ylabel("running requests")
    load_ax.set_title(f"{results.trace.name}: load and k over time (truth: {results.truth})")
    k_ax.set_ylabel("k in the last step")
    k_ax.set_xlabel("virtual time (s)")
    if load_ax.get_legend_handles_labels()[0]:  # a suite may run none of the moving policies
        load_ax.legend(loc="upper right", fontsize="small")
        k_ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _tpot_vs_concurrency(results: TraceResults, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 5))
    levels = [s.concurrency for s in results.trace.segments]
    for policy, run in results.runs.items():
        tpot = [float(np.mean(s.tpots)) * 1e3 if s.tpots else float("nan") for s in run.segments]
        ax.plot(levels, tpot, marker="o", label=policy, linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("mean TPOT (ms)")
    ax.set_title(f"{results.trace.name}: TPOT against concurrency (truth: {results.truth})")
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_all(all_results: Sequence[TraceResults], out: Path) -> list[Path]:
    written = []
    for results in all_results:
        if results.trace.sweep:
            path = out / f"{results.trace.name}-tpot-vs-concurrency.png"
            _tpot_vs_concurrency(results, path)
        else:
            path = out / f"{results.trace.name}-k-and-load.png"
            _k_and_load(results, path)
        written.append(path)
    return written
