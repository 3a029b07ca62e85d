"""The engine's truth: how long a vLLM 0.33 step really takes, as data, apart from any belief.

The controller predicts with a profile's StepCostModel (its belief); the simulated engine
prices every step with an EngineTruth, so a controller is graded on physics it was not
given. A truth is a YAML file (``lab/specops_lab/sim/truths/*.yaml``, documented in the README
there); the step time is a pure function of the step's shape (``EngineStep``)::

    N      = B * (k + 1) + P                      batched tokens (P: prefill tokens)
    gemm   = knee(weights_s, flops_per_token * N / (peak_flops * efficiency))
    attn   = knee(kv_s_per_token * N_kv, attention_flops_per_pair * (k + 1) * N_ctx / rate)
    target = gemm + attn + comm_s + comm_s_per_token * N
    step   = target + overhead_s + speculation + table.penalty_s (while a table is set)

Every formula takes one step (``EngineStep``, plain numbers) or many (``EngineSteps``, one
array entry per step), so a stretch of steps is priced in one pass with the same arithmetic
as a single step.

``knee(a, b)`` is the soft maximum ``(a**p + b**p) ** (1 / p)`` of memory time and compute
time (p = ``knee``; omitted: the hard maximum; 1: their sum, the additive fit). The weight
GEMMs and attention are separate kernels, each bound by its own roofline, so they add.
With speculation configured and requests decoding, a network draft costs ``fixed_s +
positions * (per_position_s + per_token_s * B) + kv_s_per_token * N_kv`` (positions = k,
or ``table.zero_row_draft_positions`` on a k = 0 table row, which still runs the draft),
a lookup draft ``lookup_fraction * target``, and verification (rejection sampling)
``verify.fixed_s + verify.per_token_s * B * k``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import numpy.typing as npt
import yaml
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from specops.errors import EngineConfigError
from specops.profiles import DraftFamily

__all__ = [
    "DEFAULT_TRUTH",
    "DraftTruth",
    "EngineStep",
    "EngineSteps",
    "EngineTruth",
    "TableTruth",
    "TargetTruth",
    "TruthSources",
    "VerifyTruth",
    "load_truth",
    "merge_mappings",
    "truth_names",
]

TRUTH_DIR = Path(__file__).parent / "truths"
DEFAULT_TRUTH = "llama3.1-8b-h100-eagle3"

# Every number finite: an infinite step time would stall the engine's clock for ever.
_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)
Counts = npt.NDArray[np.int64]
Times = npt.NDArray[np.floating[Any]]
Count = int | Counts
Number = float | Times
Seconds = Annotated[float, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]


@dataclass(frozen=True, slots=True)
class EngineStep:
    """The shape of one engine step, all the truth needs to price it.

    ``context_tokens`` are the decoding requests' contexts (each read once, attended by
    k + 1 query tokens); ``prefill_context_tokens`` the KV the prefill chunks attend to;
    ``table``: a per-batch-size table is configured; ``speculative``: any speculative
    config is (the draft is loaded and its slots reserved).
    """

    batch: int
    k: int
    context_tokens: int
    prefill_tokens: int = 0
    prefill_context_tokens: int = 0
    table: bool = False
    speculative: bool = False
    family: DraftFamily = DraftFamily.NETWORK


@dataclass(frozen=True, slots=True)
class EngineSteps:
    """The shapes of many steps of one engine configuration: one array entry per step."""

    batch: Counts
    k: Counts
    context_tokens: Counts
    prefill_tokens: Counts
    prefill_context_tokens: Counts
    table: bool = False
    speculative: bool = False
    family: DraftFamily = DraftFamily.NETWORK

    @classmethod
    def of(cls, step: EngineStep) -> EngineSteps:
        def one(value: int) -> Counts:
            return np.array([value], dtype=np.int64)

        return cls(
            batch=one(step.batch),
            k=one(step.k),
            context_tokens=one(step.context_tokens),
            prefill_tokens=one(step.prefill_tokens),
            prefill_context_tokens=one(step.prefill_context_tokens),
            table=step.table,
            speculative=step.speculative,
            family=step.family,
        )


@dataclass(frozen=True)
class TargetTruth:
    """The target model's forward pass: two rooflines (weight GEMMs, attention) and TP."""

    __pydantic_config__ = _STRICT

    weights_s: Seconds
    flops_per_token: Positive
    peak_flops: Positive
    efficiency: Annotated[float, Field(gt=0, le=1)]
    kv_s_per_token: Seconds
    attention_flops_per_pair: Seconds = 0.0
    knee: Annotated[float, Field(ge=1)] | None = None
    comm_s: Seconds = 0.0
    comm_s_per_token: Seconds = 0.0

    def forward(self, steps: EngineStep | EngineSteps) -> Number:
        tokens = steps.batch * (steps.k + 1) + steps.prefill_tokens
        rate = self.peak_flops * self.efficiency
        gemm = _soft_max(self.weights_s, self.flops_per_token * tokens / rate, self.knee)
        attention = _soft_max(
            self.kv_s_per_token * (steps.context_tokens + steps.prefill_context_tokens),
            self.attention_flops_per_pair * (steps.k + 1) * steps.context_tokens / rate,
            self.knee,
        )
        return gemm + attention + self.comm_s + self.comm_s_per_token * tokens


@dataclass(frozen=True)
class DraftTruth:
    """A draft network: its k sequential passes and the KV capacity it takes."""

    __pydantic_config__ = _STRICT

    fixed_s: Seconds
    per_position_s: Seconds
    per_token_s: Seconds
    kv_s_per_token: Seconds
    kv_tokens: Annotated[int, Field(ge=0)]

    def seconds(self, batch: Count, positions: Count, kv_tokens: Count) -> Number:
        return (
            self.fixed_s
            + positions * (self.per_position_s + self.per_token_s * batch)
            + self.kv_s_per_token * kv_tokens
        )


@dataclass(frozen=True)
class VerifyTruth:
    """Verifying drafts: rejection sampling and its bookkeeping, per step and per draft."""

    __pydantic_config__ = _STRICT

    fixed_s: Seconds = 0.0
    per_token_s: Seconds = 0.0


@dataclass(frozen=True)
class TableTruth:
    """What a per-batch-size table costs besides choosing k (vLLM #49548)."""

    __pydantic_config__ = _STRICT

    penalty_s: Seconds = 0.0
    zero_row_draft_positions: Annotated[int, Field(ge=0)] = 0


@dataclass(frozen=True)
class TruthSources:
    """Which published figures the numbers were fitted to, and which only compared with."""

    __pydantic_config__ = _STRICT

    fitted_to: Annotated[tuple[str, ...], Field(min_length=1)]
    compared_with: tuple[str, ...] = ()
    derived_from: str | None = None


@dataclass(frozen=True)
class EngineTruth:
    """How one model runs on one kind of accelerator in vLLM 0.33, the engine's physics."""

    __pydantic_config__ = _STRICT

    # It names the benchmark's results and plot files: letters, digits, '.', '_', '-'.
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    description: str
    model: str
    accelerator: str
    tensor_parallel_size: Annotated[int, Field(ge=1)]
    target: TargetTruth
    draft: DraftTruth
    overhead_s: Seconds
    kv_cache_tokens: Annotated[int, Field(gt=0)]
    sources: TruthSources
    lookup_fraction: Seconds = 0.0
    verify: VerifyTruth = field(default_factory=VerifyTruth)
    table: TableTruth = field(default_factory=TableTruth)
    jitter_sigma: Seconds = 0.0
    slow_pod_factor: Annotated[float, Field(ge=1)] = 1.0

    def step_time(self, step: EngineStep) -> float:
        """Seconds for one step, before noise and any pod slowdown."""
        return float(self._seconds(step))

    def step_times(self, steps: EngineSteps) -> Times:
        """Seconds for each step, before noise and any pod slowdown."""
        return np.asarray(self._seconds(steps), dtype=np.float64)

    def _seconds(self, steps: EngineStep | EngineSteps) -> Number:
        forward = self.target.forward(steps)
        seconds = forward + self.overhead_s
        if steps.table:
            seconds = seconds + self.table.penalty_s
        if not steps.speculative:
            return seconds
        zero_row = self.table.zero_row_draft_positions if steps.table else 0
        positions = _where(steps.k > 0, steps.k, zero_row)
        drafting = (steps.batch > 0) & (positions > 0)
        if steps.family is DraftFamily.LOOKUP:
            draft = self.lookup_fraction * forward
        else:
            kv = steps.context_tokens + steps.prefill_context_tokens
            draft = self.draft.seconds(steps.batch, positions, kv)
        seconds = _where(drafting, seconds + draft, seconds)
        verify = self.verify.fixed_s + self.verify.per_token_s * steps.batch * steps.k
        priced: Number = _where(drafting & (steps.k > 0), seconds + verify, seconds)
        return priced

    def kv_capacity(self, family: DraftFamily | None) -> int:
        """KV-cache tokens left for requests: all of them, less a draft network's share."""
        if family is DraftFamily.NETWORK:
            return self.kv_cache_tokens - self.draft.kv_tokens
        return self.kv_cache_tokens


def _where(condition: Any, yes: Any, no: Any) -> Any:
    """``numpy.where`` for arrays, a plain choice for one step (the same arithmetic)."""
    if isinstance(condition, np.ndarray):
        return np.where(condition, yes, no)
    return yes if condition else no


def _soft_max(memory: Number, compute: Number, p: float | None) -> Number:
    if isinstance(memory, np.ndarray) or isinstance(compute, np.ndarray):
        top: Number = np.maximum(memory, compute)
    else:
        top = max(memory, compute)
    if p is None:
        return top
    if p == 1:
        return memory + compute
    if not isinstance(top, np.ndarray):
        return 0.0 if top == 0 else _knee(memory, compute, top, p)
    with np.errstate(divide="ignore", invalid="ignore"):
        knee: Times = np.where(top > 0, _knee(memory, compute, top, p), 0.0)
    return knee


def _knee(memory: Number, compute: Number, top: Number, p: float) -> Number:
    return top * ((memory / top) ** p + (compute / top) ** p) ** (1 / p)


_ADAPTER: TypeAdapter[EngineTruth] = TypeAdapter(EngineTruth)


def truth_names() -> tuple[str, ...]:
    """The shipped truths, by name."""
    return tuple(sorted(path.stem for path in TRUTH_DIR.glob("*.yaml")))


def _truth_path(source: str, relative_to: Path | None = None) -> Path:
    shipped = TRUTH_DIR / f"{source}.yaml"
    if shipped.is_file():
        return shipped
    path = Path(source)
    if relative_to is not None and not path.is_absolute():
        path = relative_to / path
    try:
        # Resolved, so that a base cycle through another spelling of a path is seen as one.
        path = path.resolve()
        found = path.is_file()
    except OSError:
        found = False
    if not found:
        raise EngineConfigError(
            f"truth {source!r} is neither a file nor a shipped truth ({', '.join(truth_names())})"
        )
    return path


def merge_mappings(base: dict[str, object], over: dict[str, object]) -> dict[str, object]:
    """``over`` on ``base``, as a file that names a ``base`` (truth or suite) reads: nested
    mappings merge key by key, anything else (lists too) replaces."""
    merged = dict(base)
    for key, value in over.items():
        below = merged.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            merged[key] = merge_mappings(below, value)
        else:
            merged[key] = value
    return merged


def _truth_data(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, object]:
    """The file's mapping over the mapping of its ``base`` truth (nested keys merge)."""
    if path in seen:
        raise EngineConfigError(f"truth {path}: base truths form a cycle")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise EngineConfigError(f"cannot read truth {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise EngineConfigError(f"truth {path} must be a mapping")
    base = data.pop("base", None)
    if base is None:
        return data
    try:
        below = _truth_path(str(base), path.parent)
    except EngineConfigError as exc:
        raise EngineConfigError(f"truth {path}: base: {exc}") from None
    if "name" not in data and not seen:  # a base between two files may leave it to the top
        raise EngineConfigError(
            f"truth {path}: set name: a truth over base {base} that keeps its name would be "
            f"reported as that truth"
        )
    if "description" not in data:
        changed = ", ".join(sorted(data.keys() - {"name"})) or "nothing"
        data["description"] = f"{base} with its {changed} changed"
    return merge_mappings(_truth_data(below, (*seen, path)), data)


@cache
def load_truth(source: str) -> EngineTruth:
    """A shipped truth by name, or a truth YAML file; errors name the file and the field.

    A file may name a ``base`` truth (shipped name or path relative to the file) and set
    only what differs; nested mappings merge key by key.
    """
    path = _truth_path(source)
    data = _truth_data(path)
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(top level)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise EngineConfigError(f"invalid truth {path}: {problems}") from None
