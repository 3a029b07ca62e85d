"""How much faster than real time one simulated engine runs (a benchmark, not a test)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from specops.sim._engine import EngineConfig, SimulatedEngine, parse_speculative_config
from specops.sim._truth import DEFAULT_TRUTH, load_truth
from specops.sim._workload import Workload, load_workload

__all__ = ["SpeedResult", "measure_speed", "write_speed"]


@dataclass(frozen=True)
class SpeedResult:
    batch: int
    k: int
    simulated_s: float
    wall_s: float
    steps: int

    @property
    def ratio(self) -> float:
        """Simulated seconds per wall-clock second."""
        return self.simulated_s / self.wall_s

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "ratio": self.ratio}, indent=2)


def measure_speed(
    *, batch: int = 128, k: int = 3, simulated_s: float = 600.0, truth: str = DEFAULT_TRUTH
) -> SpeedResult:
    """Closed loop at ``batch`` with EAGLE k drafts for ``simulated_s`` virtual seconds."""
    config = EngineConfig(
        max_num_seqs=batch,
        speculative=parse_speculative_config(
            json.dumps({"method": "eagle", "model": "eagle-head", "num_speculative_tokens": k})
        ),
    )
    engine = SimulatedEngine(Workload(load_workload("sharegpt")), config, truth=load_truth(truth))
    for _ in range(batch):
        engine.add_request()
    steps = 0
    started = time.perf_counter()
    while engine.now < simulated_s:
        for _ in engine.step().finished:
            engine.add_request()
        steps += 1
    wall = time.perf_counter() - started
    return SpeedResult(batch, k, engine.now, wall, steps)


def write_speed(result: SpeedResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_json() + "\n", encoding="utf-8")
