"""A fidelity check of the live stack: the live engines' steps against what the simulated
engine's truth predicts for the same config and load.

The live engines run in real time on processes that share this machine's CPUs with the
control plane, the operator, Prometheus and the load; when a process waits for a CPU its
steps take longer than the truth says. Each interval of an engine's own counters (vLLM's
names, as Prometheus scraped them) gives the wall time per step while the engine was busy
throughout, and the step's mean shape: requests decoding (generated tokens less accepted
drafts: each decoding request emits one token besides its accepted drafts), the k it
drafted (draft tokens over drafts), prefill tokens, and the decoding requests' context
(the KV cache in use, less each running request's lookahead slots). The truth prices that
shape; the ratio of the measured to the predicted time over the same steps says how
faithful the live run is (1.0: the truth's speed; the mean shape prices a mix of steps to
within a few percent, as checked against the engine in virtual time).

Pure: the intervals come in as numbers (see ``specops_lab.demo._cluster`` for the queries).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specops.profiles import DraftFamily
from specops_lab.sim import EngineStep, EngineTruth

__all__ = ["EngineInterval", "Fidelity", "StepCheck", "check_steps"]

# The simulated engine's KV block size (vLLM's default): each running request holds its
# context, its lookahead slots and on average half a block unused.
_BLOCK = 16


@dataclass(frozen=True)
class EngineInterval:
    """One engine over one interval: rates per second of wall time and mean gauges.

    ``busy`` says it had running requests throughout (the fewest running was above 0).
    """

    end: float
    steps_per_s: float
    generated_per_s: float
    accepted_per_s: float
    drafts_per_s: float
    draft_tokens_per_s: float
    prompt_tokens_per_s: float
    running: float
    kv_usage: float
    busy: bool


@dataclass(frozen=True)
class StepCheck:
    """One interval: its phase, the k run, the decoding batch, and the wall time per step
    measured against the truth's for that shape."""

    end: float
    phase: str
    k: int
    batch: float
    measured_s: float
    predicted_s: float
    steps: float

    @property
    def ratio(self) -> float:
        return self.measured_s / self.predicted_s


@dataclass(frozen=True)
class Fidelity:
    truth: str
    checks: tuple[StepCheck, ...]

    def _chosen(self, phase: str | None, k: int | None) -> list[StepCheck]:
        return [
            c
            for c in self.checks
            if (phase is None or c.phase == phase) and (k is None or c.k == k)
        ]

    def ratio(self, phase: str | None = None, k: int | None = None) -> float | None:
        """Measured over predicted time of the same steps (None: no busy interval)."""
        chosen = self._chosen(phase, k)
        predicted = sum(c.predicted_s * c.steps for c in chosen)
        if predicted <= 0:
            return None
        return sum(c.measured_s * c.steps for c in chosen) / predicted

    def mean(self, field: str, phase: str | None = None, k: int | None = None) -> float | None:
        """The step-weighted mean of a check's ``measured_s``, ``predicted_s`` or ``batch``."""
        chosen = self._chosen(phase, k)
        steps = sum(c.steps for c in chosen)
        if steps <= 0:
            return None
        return sum(float(getattr(c, field)) * c.steps for c in chosen) / steps

    def ks(self, phase: str | None = None) -> tuple[int, ...]:
        """The ks the engines ran, by the steps run at each, most first."""
        steps: dict[int, float] = {}
        for c in self._chosen(phase, None):
            steps[c.k] = steps.get(c.k, 0.0) + c.steps
        return tuple(sorted(steps, key=lambda k: -steps[k]))

    @property
    def intervals(self) -> int:
        return len(self.checks)


def _shape(interval: EngineInterval, truth: EngineTruth) -> EngineStep | None:
    steps = interval.steps_per_s
    decoding = (interval.generated_per_s - interval.accepted_per_s) / steps
    if decoding < 0.5:
        return None
    drafts = interval.drafts_per_s
    k = round(interval.draft_tokens_per_s / drafts) if drafts > 0 else 0
    capacity = truth.kv_capacity(DraftFamily.NETWORK if k > 0 else None)
    held = interval.running * (1 + k + _BLOCK / 2)
    context = max(0.0, interval.kv_usage * capacity - held)
    # The KV in use belongs to every running request; the decoding ones read theirs.
    share = min(1.0, decoding / interval.running) if interval.running > 0 else 1.0
    return EngineStep(
        batch=round(decoding),
        k=k,
        context_tokens=round(context * share),
        prefill_tokens=round(interval.prompt_tokens_per_s / steps),
        speculative=k > 0,
    )


def check_steps(
    intervals: Sequence[EngineInterval],
    truth: EngineTruth,
    phase_of: Callable[[float], str],
    seconds: float,
) -> Fidelity:
    """The busy intervals of ``seconds`` each, priced on ``truth``; ``phase_of`` names the
    phase of the day an interval ends in."""
    checks: list[StepCheck] = []
    for interval in intervals:
        if not interval.busy or interval.steps_per_s <= 0:
            continue
        shape = _shape(interval, truth)
        if shape is None:
            continue
        checks.append(
            StepCheck(
                end=interval.end,
                phase=phase_of(interval.end),
                k=shape.k,
                batch=shape.batch,
                measured_s=1.0 / interval.steps_per_s,
                predicted_s=truth.step_time(shape),
                steps=interval.steps_per_s * seconds,
            )
        )
    return Fidelity(truth.name, tuple(checks))
