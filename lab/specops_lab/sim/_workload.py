"""Workloads: what requests look like and how many tokens each verification step emits.

Acceptance is always a *trace* per request: ``trace[pos]`` is how many tokens one
verification step starting at generated position ``pos`` would emit with unlimited draft
length, bonus token included. The replay rule of the calibration data then gives every
step: with k drafts a step emits ``min(trace[pos], k + 1)`` and moves ``pos`` forward by
that many; k = 0 emits one. A trace component replays the measured traces; a parametric
component draws a trace from per-position *conditional* acceptance rates (the chance
draft i is accepted given drafts 0..i-1 were). Positions past the trace wrap around.

A workload is data (``WorkloadSpec``, loadable from YAML or JSON): named components
and a timeline of mixes, so a benchmark adds workloads without code.
"""

from __future__ import annotations

import gzip
import json
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specops.errors import EngineConfigError
from specops.profiles import DraftFamily

__all__ = [
    "BUILTIN_WORKLOADS",
    "DrawnRequest",
    "LengthDistribution",
    "MixPhase",
    "ParametricComponent",
    "TraceComponent",
    "TraceSet",
    "Workload",
    "WorkloadSpec",
    "load_trace_set",
    "load_workload",
    "replay",
]

_TRACE_DIR = Path(__file__).parent / "traces"
# Longest run a parametric trace can hold: beyond any k vLLM is configured with.
_MAX_RUN = 32

IntArray = npt.NDArray[np.int32]


def replay(trace: Sequence[int] | IntArray, k: int) -> tuple[int, int]:
    """Replay one request's trace with k drafts per step: (tokens emitted, steps).

    The last step may emit past the end of the trace; its tokens count, as in the
    calibration README's table.
    """
    pos = emitted = steps = 0
    cap = k + 1
    length = len(trace)
    while pos < length:
        tokens = min(int(trace[pos]), cap)
        pos += tokens
        emitted += tokens
        steps += 1
    return emitted, steps


@dataclass(frozen=True)
class TraceSet:
    """Measured requests: lengths and one acceptance trace per draft family."""

    prompt_len: IntArray
    output_len: IntArray
    network: tuple[IntArray, ...]
    lookup: tuple[IntArray, ...]

    def traces(self, family: DraftFamily) -> tuple[IntArray, ...]:
        return self.network if family is DraftFamily.NETWORK else self.lookup


@cache
def load_trace_set(source: str) -> TraceSet:
    """A calibration trace set by name (``sharegpt``, ``gsm8k``) or a JSONL(.gz) path."""
    candidates = [Path(source), _TRACE_DIR / f"llama3.1-8b-h100-{source}.jsonl.gz"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        known = sorted(p.name.split("-")[-1].split(".")[0] for p in _TRACE_DIR.glob("*.jsonl.gz"))
        raise EngineConfigError(
            f"trace {source!r} is neither a file nor a built-in trace set ({', '.join(known)})"
        )
    opener = gzip.open if path.suffix == ".gz" else open
    prompt: list[int] = []
    output: list[int] = []
    network: list[IntArray] = []
    lookup: list[IntArray] = []
    with opener(path, "rt", encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            try:
                row = json.loads(line)
                prompt.append(int(row["prompt_len"]))
                output.append(int(row["output_len"]))
                network.append(np.asarray(row["eagle"], dtype=np.int32))
                lookup.append(np.asarray(row["ngram"], dtype=np.int32))
            except (KeyError, TypeError, ValueError) as exc:
                raise EngineConfigError(
                    f"{path}:{number}: a trace row needs prompt_len, output_len, eagle and "
                    f"ngram ({exc})"
                ) from exc
    if not prompt or any(len(t) == 0 or t.min() < 1 for t in (*network, *lookup)):
        raise EngineConfigError(f"{path}: traces must be non-empty with every entry >= 1")
    return TraceSet(
        prompt_len=np.asarray(prompt, dtype=np.int32),
        output_len=np.asarray(output, dtype=np.int32),
        network=tuple(network),
        lookup=tuple(lookup),
    )


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LengthDistribution(_Spec):
    """A token count: lognormal around ``mean`` with log-space ``sigma`` (0: always ``mean``)."""

    mean: int = Field(ge=1)
    sigma: float = Field(default=0.0, ge=0.0)
    max: int | None = Field(default=None, ge=1)

    def draw(self, rng: np.random.Generator) -> int:
        if self.sigma == 0.0:
            value = self.mean
        else:
            mu = np.log(self.mean) - self.sigma**2 / 2
            value = round(float(rng.lognormal(mu, self.sigma)))
        return max(1, min(value, self.max) if self.max is not None else value)


class TraceComponent(_Spec):
    """Replay measured requests: a built-in trace set name or a JSONL path."""

    kind: Literal["trace"] = "trace"
    trace: str


def _check_rates(rates: tuple[float, ...], key: str) -> None:
    if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError(f"{key} needs at least one rate, each in [0, 1], got {list(rates)}")


class ParametricComponent(_Spec):
    """Acceptance from per-position conditional rates; the last rate repeats past the list."""

    kind: Literal["parametric"] = "parametric"
    network: tuple[float, ...]
    lookup: tuple[float, ...] | None = None
    prompt_len: LengthDistribution
    output_len: LengthDistribution

    @model_validator(mode="after")
    def _rates(self) -> ParametricComponent:
        _check_rates(self.network, "network")
        if self.lookup is not None:
            _check_rates(self.lookup, "lookup")
        return self


Component = Annotated[TraceComponent | ParametricComponent, Field(discriminator="kind")]


class MixPhase(_Spec):
    """From ``start_s`` (engine seconds) on, new requests pick a component by these weights."""

    start_s: float = Field(ge=0.0)
    weights: dict[str, float]


class WorkloadSpec(_Spec):
    """Named components and, optionally, a timeline of mixes (default: equal weights)."""

    name: str
    components: dict[str, Component]
    phases: tuple[MixPhase, ...] = ()

    @model_validator(mode="after")
    def _phases(self) -> WorkloadSpec:
        if not self.components:
            raise ValueError("components: a workload needs at least one component")
        starts = [phase.start_s for phase in self.phases]
        if starts and (starts[0] != 0.0 or starts != sorted(starts)):
            raise ValueError("phases: start_s must begin at 0 and increase")
        for index, phase in enumerate(self.phases):
            unknown = set(phase.weights) - set(self.components)
            if unknown:
                raise ValueError(
                    f"phases[{index}].weights: unknown components {sorted(unknown)}; "
                    f"known: {sorted(self.components)}"
                )
            if any(w < 0 for w in phase.weights.values()) or sum(phase.weights.values()) <= 0:
                raise ValueError(f"phases[{index}].weights must be >= 0 with a positive sum")
        return self


BUILTIN_WORKLOADS: dict[str, WorkloadSpec] = {
    name: WorkloadSpec(name=name, components={name: TraceComponent(trace=name)})
    for name in ("sharegpt", "gsm8k")
}


@dataclass(frozen=True)
class DrawnRequest:
    """One request's shape: its lengths and its acceptance trace for the engine's draft family.

    ``shared``: the trace is a calibration row that every draw of the row returns (the same
    array), so what the engine derives from it can be kept for the next draw.
    """

    prompt_len: int
    output_len: int
    trace: IntArray
    shared: bool = False


class Workload:
    """A WorkloadSpec made runnable: draws requests, seeded and reproducible."""

    def __init__(self, spec: WorkloadSpec, *, seed: int = 0) -> None:
        self.spec = spec
        self._rng = np.random.default_rng(seed)
        self._names = tuple(spec.components)
        self._traces = {
            name: load_trace_set(component.trace)
            for name, component in spec.components.items()
            if isinstance(component, TraceComponent)
        }
        # A calibration row's draws are all alike: each is made once, per draft family.
        self._rows: dict[tuple[str, DraftFamily, int], DrawnRequest] = {}
        phases = spec.phases or (MixPhase(start_s=0.0, weights=dict.fromkeys(self._names, 1.0)),)
        self._starts = [phase.start_s for phase in phases]
        # Generator.choice(p=...) draws one uniform and bisects the normalised cumulative
        # weights; doing the same directly keeps its stream at a fraction of its cost.
        self._cdf: list[list[float]] = []
        for phase in phases:
            total = sum(phase.weights.values())
            cdf = np.cumsum([phase.weights.get(n, 0.0) / total for n in self._names])
            self._cdf.append((cdf / cdf[-1]).tolist())

    @property
    def max_trace_len(self) -> int:
        """The longest trace a drawn request can carry."""
        lengths = [max(len(t) for t in s.network + s.lookup) for s in self._traces.values()]
        for component in self.spec.components.values():
            if isinstance(component, ParametricComponent):
                lengths.append(component.output_len.max or 8 * component.output_len.mean)
        return max(lengths)

    def phase(self, now: float) -> int:
        """The index of the mix phase in force at ``now``."""
        return bisect_right(self._starts, now) - 1

    def next_phase_start(self, now: float) -> float:
        """When the mix next changes after ``now`` (infinity: never)."""
        following = self.phase(now) + 1
        return self._starts[following] if following < len(self._starts) else float("inf")

    def draw(self, now: float, family: DraftFamily) -> DrawnRequest:
        return self.draw_in(self.phase(now), family)

    def stream(self) -> dict[str, object]:
        """Where the draws stand: ``rewind`` to it and the next draws are drawn again."""
        return dict(self._rng.bit_generator.state)

    def rewind(self, stream: dict[str, object]) -> None:
        self._rng.bit_generator.state = stream

    def draw_in(self, phase: int, family: DraftFamily) -> DrawnRequest:
        """A request as ``draw`` makes it for a time in mix phase ``phase``."""
        name = self._names[bisect_right(self._cdf[phase], self._rng.random())]
        component = self.spec.components[name]
        if isinstance(component, TraceComponent):
            traces = self._traces[name]
            row = int(self._rng.integers(len(traces.prompt_len)))
            key = (name, family, row)
            drawn = self._rows.get(key)
            if drawn is None:
                drawn = self._rows[key] = DrawnRequest(
                    prompt_len=int(traces.prompt_len[row]),
                    output_len=int(traces.output_len[row]),
                    trace=traces.traces(family)[row],
                    shared=True,
                )
            return drawn
        output_len = min(component.output_len.draw(self._rng), self.max_trace_len)
        rates = component.network
        if family is DraftFamily.LOOKUP and component.lookup is not None:
            rates = component.lookup
        return DrawnRequest(
            prompt_len=component.prompt_len.draw(self._rng),
            output_len=output_len,
            trace=self._parametric_trace(rates, output_len),
        )

    def _parametric_trace(self, rates: tuple[float, ...], length: int) -> IntArray:
        conditional = np.asarray(rates + (rates[-1],) * (_MAX_RUN - len(rates)))[:_MAX_RUN]
        accepted = self._rng.random((length, _MAX_RUN)) < conditional
        runs: IntArray = np.cumprod(accepted, axis=1).sum(axis=1).astype(np.int32)
        return runs + 1


def load_workload(source: str) -> WorkloadSpec:
    """A built-in workload by name, or a WorkloadSpec from a YAML or JSON file."""
    if source in BUILTIN_WORKLOADS:
        return BUILTIN_WORKLOADS[source]
    path = Path(source)
    if not path.is_file():
        raise EngineConfigError(
            f"workload {source!r} is neither a file nor a built-in workload "
            f"({', '.join(sorted(BUILTIN_WORKLOADS))})"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        spec = WorkloadSpec.model_validate(data)
    except (yaml.YAMLError, ValidationError) as exc:
        raise EngineConfigError(f"invalid workload {path}: {exc}") from exc
    for component in spec.components.values():
        if isinstance(component, TraceComponent):
            load_trace_set(component.trace)
    return spec
