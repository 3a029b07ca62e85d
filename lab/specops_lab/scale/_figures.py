"""What the fleet-scale benchmark measured, the targets it is judged against, and its table.

Pure: the run (``_run``) fills :class:`ScaleFigures`; nothing here talks to a cluster."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specops_lab.scale._sharded import ShardRun

__all__ = [
    "EditPath",
    "PhaseLoad",
    "ScaleFigures",
    "ScaleTargets",
    "Target",
    "judge",
    "nearest_rank",
    "render_table",
]

# Shares past which a limit counts as what bound a phase: the client's rate limit, or the
# machine's CPU (the control plane, kwok's pods and the operator all share it).
_BOUND_SHARE = 0.85


def nearest_rank(values: list[float], q: float) -> float:
    """The ``q`` quantile by nearest rank (p99 of 20 edits is the slowest one)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class PhaseLoad:
    """What a phase cost: the operator's requests (audit log), those of them its own client
    sent (``limited``: the rate limit applies to these, not to kopf's watches, patches and
    Events), its CPU seconds, the whole machine's busy CPU seconds out of ``capacity_cpu_s``
    (cores times the phase's wall time), and the client's rate limit (None when none) with
    the burst it lets through at once; ``components_cpu_s``: the CPU seconds of each process
    of the local control plane (none on a cluster whose processes are not known)."""

    wall_s: float
    requests: int
    limited: int
    operator_cpu_s: float
    machine_cpu_s: float
    capacity_cpu_s: float
    limit_qps: float | None
    limit_burst: int = 0
    components_cpu_s: tuple[tuple[str, float], ...] = ()

    @property
    def limited_per_second(self) -> float:
        return self.limited / self.wall_s if self.wall_s > 0 else 0.0

    def bound_by(self) -> str:
        """What held the phase back, read from its own figures: the rate limit when the
        client sent near what it lets through (its burst, then its rate), else the CPU."""
        allowed = self.limit_burst + (self.limit_qps or 0.0) * self.wall_s
        if self.limit_qps and self.limited >= _BOUND_SHARE * allowed:
            return "the operator's client-side rate limit (`operator.kubeQps`)"
        if self.capacity_cpu_s > 0 and self.machine_cpu_s >= _BOUND_SHARE * self.capacity_cpu_s:
            busy = self.machine_cpu_s
            users = [("the operator", self.operator_cpu_s), *self.components_cpu_s]
            named = "; ".join(f"{who} {cpu / busy:.0%}" for who, cpu in users if busy > 0)
            rest = "" if self.components_cpu_s else "; the rest the control plane and the fake pods"
            return (
                f"this machine's CPU ({busy / self.capacity_cpu_s:.0%} busy, of it: {named}{rest})"
            )
        return "neither the rate limit nor the CPU (waits: the API server's answers, the watches)"

    def line(self, phase: str, services: int) -> str:
        limit = f"{self.limit_qps:g}/s (burst {self.limit_burst})" if self.limit_qps else "none"
        return (
            f"- {phase}: {self.requests} operator requests in {self.wall_s:.1f} s "
            f"({self.requests / max(services, 1):.1f} per service); {self.limited} through "
            f"its own client, {self.limited_per_second:.0f}/s against its limit of {limit} "
            "(kopf's own requests are not limited); CPU: the operator "
            f"{self.operator_cpu_s:.0f} s, the machine {self.machine_cpu_s:.0f} of "
            f"{self.capacity_cpu_s:.0f} s. Bound by {self.bound_by()}."
        )


@dataclass(frozen=True)
class EditPath:
    """Where one edit's time went, on one clock (this machine's): the admin's PATCH of the
    service until the API server answered it; then until the operator's apply of that
    service's Deployment reached the API server (the watch delivering the edit, kopf's queue,
    the render, the rate limit); the API server's answer to that apply (both from its audit
    log); the rest until the benchmark's next read saw the Deployment carry the edit."""

    service: str
    total_s: float
    patched_s: float
    until_sent_s: float
    answered_s: float

    @property
    def seen_s(self) -> float:
        return max(0.0, self.total_s - self.patched_s - self.until_sent_s - self.answered_s)

    def line(self, which: str) -> str:
        return (
            f"- {which} ({self.service}, {self.total_s:.1f} s): the API server took "
            f"{self.patched_s:.1f} s to take the edit; {self.until_sent_s:.1f} s more until the "
            "operator's apply of its Deployment reached the API server (the watch's delivery, "
            f"kopf's queue, the render); {self.answered_s:.1f} s for the API server to answer "
            f"that apply; {self.seen_s:.1f} s until the benchmark's read saw it."
        )


@dataclass(frozen=True)
class ScaleFigures:
    """One run's measurements. Times are wall seconds on this machine; request counts come
    from the API server's audit log, for the operator's ServiceAccount alone.

    ``None`` marks what did not happen within the run's timeout (a Deployment never made, a
    restart that never converged), which fails its target."""

    services: int
    pods_per_service: int
    gpu_nodes: int
    created_s: float | None
    steady_window_s: float
    steady_requests: int
    steady_writes: int
    steady_by_kind: tuple[tuple[str, int], ...]
    rss_peak_mib: float
    rss_steady_mib: float
    burst_services: int
    burst_created_s: float | None
    edit_latencies_s: tuple[float, ...]
    edits_lost: int
    restart_converged_s: float | None
    restart_requests: int
    memory_limit_mib: float
    shards: ShardRun | None = None  # the sharded phase, when it ran
    creation: PhaseLoad | None = None  # what the fleet's creation cost, when measured
    burst: PhaseLoad | None = None  # what the burst of creations with edits cost
    slowest_edit: EditPath | None = None  # where the slowest edit's time went
    created_by_timeout: int | None = None  # the Deployments there when creation timed out
    unsettled: str = ""  # what was still on its way when the steady window began

    @property
    def steady_per_service_minute(self) -> float:
        minutes = self.steady_window_s / 60.0
        return self.steady_requests / self.services / minutes if minutes > 0 else math.inf

    @property
    def steady_writes_per_service_minute(self) -> float:
        minutes = self.steady_window_s / 60.0
        return self.steady_writes / self.services / minutes if minutes > 0 else math.inf

    @property
    def edit_p50_s(self) -> float | None:
        return nearest_rank(list(self.edit_latencies_s), 0.5) if self.edit_latencies_s else None

    @property
    def edit_p99_s(self) -> float | None:
        return nearest_rank(list(self.edit_latencies_s), 0.99) if self.edit_latencies_s else None

    @property
    def restart_requests_per_service(self) -> float:
        return self.restart_requests / (self.services + self.burst_services)


@dataclass(frozen=True)
class ScaleTargets:
    """The fleet's targets (for 1000 services; the per-service ones hold at any size)."""

    created_s: float = 120.0
    steady_per_service_minute: float = 1.0
    edit_p99_s: float = 2.0
    restart_s: float = 120.0
    restart_requests_per_service: float = 5.0


@dataclass(frozen=True)
class Target:
    """One target with what was measured against it."""

    name: str
    measured: str
    goal: str
    met: bool


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def _within(value: float | None, goal: float) -> bool:
    return value is not None and value <= goal


def judge(figures: ScaleFigures, targets: ScaleTargets) -> tuple[Target, ...]:
    """Each target met or missed, by the figures of the run."""
    p99 = figures.edit_p99_s
    return (
        Target(
            f"all {figures.services} Deployments exist after creation",
            _seconds(figures.created_s)
            + (
                f" ({figures.created_by_timeout} by the run's timeout)"
                if figures.created_s is None and figures.created_by_timeout is not None
                else ""
            ),
            f"<= {targets.created_s:.0f} s",
            _within(figures.created_s, targets.created_s),
        ),
        Target(
            "steady API requests per service per minute",
            f"{figures.steady_per_service_minute:.2f} "
            f"({figures.steady_writes_per_service_minute:.2f} writes)"
            + (f"; not at rest: {figures.unsettled}" if figures.unsettled else ""),
            f"<= {targets.steady_per_service_minute:g}",
            not figures.unsettled
            and figures.steady_per_service_minute <= targets.steady_per_service_minute,
        ),
        Target(
            f"a user's edit reaches its Deployment while {figures.burst_services} "
            "services are created (p99)",
            _seconds(p99) + (f", {figures.edits_lost} lost" if figures.edits_lost else ""),
            f"<= {targets.edit_p99_s:g} s",
            figures.edits_lost == 0 and _within(p99, targets.edit_p99_s),
        ),
        Target(
            "operator resident memory (peak)",
            f"{figures.rss_peak_mib:.0f} MiB",
            f"<= {figures.memory_limit_mib:.0f} MiB (the chart's limit)",
            figures.rss_peak_mib <= figures.memory_limit_mib,
        ),
        Target(
            "a restart converges",
            _seconds(figures.restart_converged_s),
            f"<= {targets.restart_s:.0f} s",
            _within(figures.restart_converged_s, targets.restart_s),
        ),
        Target(
            "requests per service during the restart",
            f"{figures.restart_requests_per_service:.1f}",
            f"<= {targets.restart_requests_per_service:g}",
            figures.restart_requests_per_service <= targets.restart_requests_per_service,
        ),
    ) + (_sharded_targets(figures.shards) if figures.shards is not None else ())


def _sharded_targets(run: ShardRun) -> tuple[Target, ...]:
    return (
        Target(
            f"killing one of {run.replicas} replicas ({run.shards} shards): its shards "
            "held by the others after",
            _seconds(run.moved_s),
            f"<= {run.lease_s:g} s (one Lease period)",
            _within(run.moved_s, run.lease_s),
        ),
        Target(
            "services written by two replicas in turn (the audit log's writes, "
            f"{run.services_written} services, {run.writers} replicas)",
            str(len(run.overlaps))
            + (f": {', '.join(run.overlaps[:5])}" if run.overlaps else "")
            + ("" if run.every_edit_applied else ", an edit of every service not applied"),
            "0",
            not run.overlaps and run.services_written > 0 and run.every_edit_applied,
        ),
    )


def _sharded_lines(run: ShardRun) -> list[str]:
    return [
        f"- Sharded: {run.replicas} replicas took their fair shares of {run.shards} shards "
        f"after {_seconds(run.settled_s)}; a user's edit of a service of a moved shard "
        f"reached its Deployment after {_seconds(run.edit_after_move_s)}; every service "
        "was edited before the kill and again after the move"
        + (" and each Deployment carried both." if run.every_edit_applied else ", NOT all applied.")
    ]


def render_table(figures: ScaleFigures, targets: ScaleTargets, command: str) -> str:
    """The run's table in Markdown: the targets, then where the steady traffic goes."""
    pods = figures.services * figures.pods_per_service
    lines = [
        f"# Fleet scale: {figures.services} SpeculativeServices, {pods} GPU pods, one operator",
        "",
        f"Measured by `{command}` on the local control plane ({figures.gpu_nodes} fake GPU "
        "nodes, the chart's RBAC and arguments, the operator as a local process). Request "
        "counts are the API server's audit log for the operator's ServiceAccount; times are "
        "wall seconds on this machine.",
        "",
        "| target | measured | goal | |",
        "|---|---|---|---|",
    ]
    for target in judge(figures, targets):
        verdict = "met" if target.met else "MISSED"
        lines.append(f"| {target.name} | {target.measured} | {target.goal} | {verdict} |")
    p50 = figures.edit_p50_s
    lines += [
        "",
        f"- Steady window: {figures.steady_window_s:.0f} s, {figures.steady_requests} requests "
        f"({figures.steady_writes} writes); resident memory at its end "
        f"{figures.rss_steady_mib:.0f} MiB.",
        f"- Burst: {figures.burst_services} more services, all Deployments after "
        f"{_seconds(figures.burst_created_s)}; {len(figures.edit_latencies_s)} edits, "
        f"p50 {_seconds(p50)}.",
        f"- Restart: {figures.restart_requests} requests until every service was reconciled.",
        *([figures.creation.line("Creation", figures.services)] if figures.creation else []),
        *([figures.burst.line("The burst", figures.burst_services)] if figures.burst else []),
        *([figures.slowest_edit.line("The edit at p99")] if figures.slowest_edit else []),
        *(_sharded_lines(figures.shards) if figures.shards is not None else []),
        "",
        "| steady requests | count |",
        "|---|---:|",
        *(f"| {kind} | {count} |" for kind, count in figures.steady_by_kind),
    ]
    return "\n".join(lines) + "\n"
