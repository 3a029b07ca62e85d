"""The benchmark's inputs: a suite (service, controller, traces) and load traces, as YAML.

Everything the benchmark varies is data: a load trace is a list of segments of closed-loop
concurrency (constant or a linear ramp, optionally with stationary noise) over a
workload; a suite names the service (the engine's truth, the controller's profile, method,
restart downtime, TPOT target), the controller's settings and the traces with their time
scale. A suite may name a ``base`` suite and set only what differs: nested mappings
(``service``, ``controller``) merge key by key, lists (``traces``, ``truths``,
``policies``) replace the base's.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specops.control import ControlSettings
from specops.errors import SpecopsError
from specops.policy import AcceptanceCurve
from specops_lab.sim import DEFAULT_TRUTH, merge_mappings, truth_names

__all__ = [
    "BenchError",
    "BenchSuite",
    "ControllerSpec",
    "LoadTrace",
    "Segment",
    "ServiceSpec",
    "TraceEntry",
    "load_suite",
]


class BenchError(SpecopsError):
    """A benchmark input (suite, trace, workload) is invalid or missing."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Segment(_Spec):
    """``duration_s`` of closed-loop load: ``concurrency`` clients, ramping to ``to`` if set.

    ``mix`` weighs the workload's components for requests that arrive in the segment
    (a workload shift); unset, the previous segment's mix carries on.
    """

    duration_s: float = Field(gt=0)
    concurrency: int = Field(ge=0)
    to: int | None = Field(default=None, ge=0)
    label: str | None = None
    mix: dict[str, float] | None = None

    def at(self, fraction: float) -> float:
        """Concurrency ``fraction`` of the way through the segment."""
        if self.to is None:
            return float(self.concurrency)
        return self.concurrency + (self.to - self.concurrency) * fraction

    def name(self, index: int) -> str:
        if self.label:
            return self.label
        shape = f"{self.concurrency}->{self.to}" if self.to is not None else f"{self.concurrency}"
        return f"{index}:c{shape}"


class LoadTrace(_Spec):
    """Concurrency over time on one workload.

    ``sweep``: every segment is its own run (a steady sweep), the first ``warmup_s`` of
    each left out of its figures. ``noise``: each ``noise_period_s`` the concurrency is
    scaled by a factor drawn from N(1, noise), a stationary but noisy load. ``mixed``:
    the trace counts among the mixed traces of the targets (ahead of every fixed config,
    near the oracle).
    """

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # names files: as a truth's
    description: str = ""
    workload: str
    segments: tuple[Segment, ...] = Field(min_length=1)
    sweep: bool = False
    warmup_s: float = Field(default=0.0, ge=0)
    noise: float = Field(default=0.0, ge=0, le=1)
    noise_period_s: float = Field(default=10.0, gt=0)
    mixed: bool = True

    @model_validator(mode="after")
    def _one_mix_per_label(self) -> LoadTrace:
        """A label names the truth's best table for its segment's mix: two mixes under one
        label would be one baseline, the other's runs lost."""
        seen: dict[str, str] = {}
        mix: dict[str, float] | None = None
        for segment in self.segments:
            mix = segment.mix if segment.mix is not None else mix
            if segment.label is None:
                continue
            this = json.dumps(mix, sort_keys=True)
            if seen.setdefault(segment.label, this) != this:
                raise ValueError(
                    f"segments labelled {segment.label!r} run different mixes "
                    f"({seen[segment.label]} and {this}): give each mix a label of its own"
                )
        return self

    def scaled(self, factor: float) -> LoadTrace:
        """The same trace with every duration multiplied by ``factor`` (a shorter CI run)."""
        return self.model_copy(
            update={
                "segments": tuple(
                    s.model_copy(update={"duration_s": s.duration_s * factor})
                    for s in self.segments
                ),
                "warmup_s": self.warmup_s * factor,
            }
        )

    @property
    def duration_s(self) -> float:
        return sum(s.duration_s for s in self.segments)


class ServiceSpec(_Spec):
    """The served model, its speculative method, and what a restart costs.

    ``truth`` is the engine's physics (a shipped truth's name or a truth file); ``profile``
    is the controller's prior belief about it, which the truth need not match.
    ``initial_k`` is the k the controlled service starts with, as the operator starts a
    SpeculativeService at ``numSpeculativeTokens.initial``. ``per_batch_size`` False is a
    SpeculativeService with ``perBatchSizeSchedule: false``: the controller chooses one k,
    never vLLM's per-batch-size table.
    """

    truth: str = DEFAULT_TRUTH
    profile: str = "llama3.1-8b-h100"
    method: str = "eagle3"
    draft_model: str = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    max_num_seqs: int = Field(default=256, ge=1)
    restart_downtime_s: float = Field(default=60.0, ge=0)
    tpot_target_ms: float = Field(default=40.0, gt=0)
    k_max: int = Field(default=7, ge=1, le=32)
    initial_k: int = Field(default=3, ge=1, le=32)
    prior_acceptance: tuple[float, ...] = Field(min_length=1, max_length=32)
    per_batch_size: bool = True
    seed: int = 0

    @field_validator("prior_acceptance")
    @classmethod
    def _acceptance_curve(cls, rates: tuple[float, ...]) -> tuple[float, ...]:
        """The controller's prior is a curve it builds at every decision: refused here, at
        load, rather than in the middle of a run."""
        AcceptanceCurve(rates)  # each rate in [0, 1], none above the one before
        return rates

    @model_validator(mode="after")
    def _starts_within_its_range(self) -> ServiceSpec:
        """As the API server refuses a SpeculativeService whose initial k lies outside its
        range, rather than running another k than the one asked for."""
        if self.initial_k > self.k_max:
            raise ValueError(
                f"service.initial_k {self.initial_k} is above service.k_max {self.k_max}: "
                f"the service would start on a k it may not run; lower initial_k or raise k_max"
            )
        return self


# The load samples a window must hold before the controller decides on it.
_MIN_LOAD_SAMPLES = ControlSettings().min_load_samples


class ControllerSpec(_Spec):
    """The slow loop's knobs in the benchmark (seconds of virtual time).

    ``rollout_poll_s``: how often a rollout in progress is followed, as the operator does
    (its ``rollout_poll_s``), so the measured rollout durations, which price a restart,
    are the engine's downtime and not a window's granularity. A window must hold
    enough scrapes to decide on.
    """

    window_s: float = Field(default=60.0, gt=0)
    scrape_s: float = Field(default=2.0, gt=0)
    rollout_poll_s: float = Field(default=15.0, gt=0)
    min_dwell_s: float = Field(default=300.0, ge=0)
    max_reconfigurations_per_hour: int = Field(default=4, ge=0)
    margin: float = Field(default=1.5, ge=0)
    min_gain: float = Field(default=0.03, ge=0)
    regime_min_s: float = Field(default=300.0, ge=0)
    regime_max_s: float = Field(default=3600.0, gt=0)
    min_drafts: int = Field(default=2000, ge=1)

    @model_validator(mode="after")
    def _window_holds_the_samples(self) -> ControllerSpec:
        if self.window_s < _MIN_LOAD_SAMPLES * self.scrape_s:
            raise ValueError(
                f"controller.window_s {self.window_s:g} s holds fewer than the "
                f"{_MIN_LOAD_SAMPLES} load samples a decision needs at controller.scrape_s "
                f"{self.scrape_s:g} s: make window_s at least {_MIN_LOAD_SAMPLES} x scrape_s"
            )
        return self


class TraceEntry(_Spec):
    """A trace file of the suite, with its time scale and, for a sweep, which segments."""

    trace: str
    time_scale: float = Field(default=1.0, gt=0)
    levels: tuple[int, ...] | None = None


class BenchSuite(_Spec):
    """Traces, policies and the service; ``truths``: every trace runs on each of these
    engine truths (default: the service's one), the controller always starting from the
    service's profile, whichever truth the engine runs."""

    name: str
    service: ServiceSpec
    controller: ControllerSpec = ControllerSpec()
    traces: tuple[TraceEntry, ...] = Field(min_length=1)
    policies: tuple[str, ...] | None = Field(default=None, min_length=1)
    truths: tuple[str, ...] | None = Field(default=None, min_length=1)

    @field_validator("policies", mode="before")
    @classmethod
    def _unquoted_off(cls, policies: object) -> object:
        """YAML reads an unquoted ``off`` as false: that policy is ``off``."""
        if isinstance(policies, list | tuple):
            return ["off" if policy is False else policy for policy in policies]
        return policies

    @property
    def truth_axis(self) -> tuple[str, ...]:
        return self.truths or (self.service.truth,)


def _read_yaml(path: Path, what: str) -> object:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BenchError(f"cannot read {what} {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise BenchError(f"{what} {path} is not valid YAML: {exc}") from exc


def load_trace(path: Path, entry: TraceEntry) -> LoadTrace:
    """A trace file, scaled and (for a sweep) cut to the entry's levels."""
    try:
        trace = LoadTrace.model_validate(_read_yaml(path, "trace"))
    except ValidationError as exc:
        raise BenchError(f"invalid trace {path}: {exc}") from exc
    if entry.levels is not None:
        if not trace.sweep:
            raise BenchError(f"{path}: levels apply only to a sweep trace (sweep: true)")
        chosen = tuple(s for s in trace.segments if s.concurrency in entry.levels)
        missing = set(entry.levels) - {s.concurrency for s in chosen}
        if missing:
            raise BenchError(f"{path}: levels {sorted(missing)} are not segments of the sweep")
        trace = trace.model_copy(update={"segments": chosen})
    workload = Path(trace.workload)
    if not workload.is_absolute() and (path.parent / workload).is_file():
        trace = trace.model_copy(update={"workload": str(path.parent / workload)})
    trace = trace.scaled(entry.time_scale)
    if trace.sweep:
        _check_warmup(path, trace, entry.time_scale)
    return trace


def _check_warmup(path: Path, trace: LoadTrace, time_scale: float) -> None:
    """A sweep measures each segment after its warm-up: one no longer than its warm-up
    would have no figures at all."""
    for index, segment in enumerate(trace.segments):
        if trace.warmup_s >= segment.duration_s:
            raise BenchError(
                f"trace {trace.name} ({path}): warmup_s {trace.warmup_s:g} s leaves nothing "
                f"to measure of segment {segment.name(index)} ({segment.duration_s:g} s, "
                f"time_scale {time_scale:g} applied to both): make warmup_s shorter than "
                "every segment of the sweep"
            )


def _suite_data(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, object]:
    """The suite's mapping, over the mapping of its ``base`` suite if it names one."""
    if path.resolve() in seen:
        chain = " -> ".join(str(p) for p in (*seen, path.resolve()))
        raise BenchError(f"suite {path}: base suites form a cycle ({chain}): remove one base")
    data = _read_yaml(path, "suite")
    if not isinstance(data, dict):
        raise BenchError(f"suite {path} must be a mapping")
    _resolve_truths(path, data)
    base = data.pop("base", None)
    if base is None:
        return data
    below = path.parent / str(base)
    if not below.is_file():
        raise BenchError(f"suite {path}: base {base} is not a file ({below} does not exist)")
    return merge_mappings(_suite_data(below, (*seen, path.resolve())), data)


def _truth_file(path: Path, truth: object) -> object:
    """A truth file named relative to the suite file, as its traces are; a shipped
    truth's name stays a name."""
    if not isinstance(truth, str) or truth in truth_names() or Path(truth).is_absolute():
        return truth
    beside = path.parent / truth
    return str(beside) if beside.is_file() else truth


def _resolve_truths(path: Path, data: dict[str, object]) -> None:
    """The suite file's ``truths`` and ``service.truth``, resolved against the file."""
    truths = data.get("truths")
    if isinstance(truths, list):
        data["truths"] = [_truth_file(path, truth) for truth in truths]
    service = data.get("service")
    if isinstance(service, dict) and "truth" in service:
        data["service"] = {**service, "truth": _truth_file(path, service["truth"])}


def load_suite(path: Path) -> tuple[BenchSuite, tuple[LoadTrace, ...]]:
    """A suite file and its traces; trace, truth and base paths are relative to the suite
    file, and a base's nested mappings merge with the suite's (lists replace)."""
    try:
        suite = BenchSuite.model_validate(_suite_data(path))
    except ValidationError as exc:
        raise BenchError(f"invalid suite {path}: {exc}") from exc
    traces = tuple(load_trace(path.parent / entry.trace, entry) for entry in suite.traces)
    names = [trace.name for trace in traces]
    shared = sorted({name for name in names if names.count(name) > 1})
    if shared:
        raise BenchError(
            f"suite {path}: traces share the name {', '.join(shared)} (their results would "
            "be one): give each trace file a name of its own"
        )
    if suite.policies is None or "specops" in suite.policies:  # the controller runs
        for trace in traces:
            _check_window(path, trace, suite.controller.window_s)
    return suite, traces


def _check_window(path: Path, trace: LoadTrace, window_s: float) -> None:
    """The controller decides a window into each run: a run no longer than its window (a
    sweep's segment, or a whole trace) would never see the controller decide."""
    run_s = min(s.duration_s for s in trace.segments) if trace.sweep else trace.duration_s
    if window_s >= run_s:
        what = "a segment of sweep" if trace.sweep else "trace"
        raise BenchError(
            f"suite {path}: controller.window_s {window_s:g} s is not shorter than {what} "
            f"{trace.name} ({run_s:g} s after time_scale): the controller would never decide; "
            "shorten window_s or lengthen the trace"
        )
