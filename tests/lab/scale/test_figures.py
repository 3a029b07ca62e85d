"""The fleet targets judged from a run's figures, and the table that reports them."""

from __future__ import annotations

from dataclasses import replace

from specops_lab.scale import ScaleFigures, ScaleTargets, judge, render_table
from specops_lab.scale._figures import EditPath, PhaseLoad, nearest_rank

FIGURES = ScaleFigures(
    services=100,
    pods_per_service=5,
    gpu_nodes=64,
    created_s=23.8,
    steady_window_s=120.0,
    steady_requests=960,
    steady_writes=0,
    steady_by_kind=(("get deployments", 600), ("list pods", 360)),
    rss_peak_mib=112.0,
    rss_steady_mib=100.0,
    burst_services=300,
    burst_created_s=114.0,
    edit_latencies_s=tuple([0.5] * 19 + [4.2]),
    edits_lost=0,
    restart_converged_s=40.0,
    restart_requests=1200,
    memory_limit_mib=256.0,
)


def test_each_target_is_judged_from_its_own_figure() -> None:
    verdicts = {t.measured: t.met for t in judge(FIGURES, ScaleTargets())}
    # 960 requests / 100 services / 2 minutes = 4.8 per service per minute: missed.
    assert verdicts["4.80 (0.00 writes)"] is False
    assert verdicts["23.8 s"] is True
    # p99 of 20 edits is the slowest one.
    assert verdicts["4.2 s"] is False
    assert verdicts["112 MiB"] is True
    assert verdicts["40.0 s"] is True
    # 1200 requests over 400 services.
    assert verdicts["3.0"] is True


def test_what_never_happened_misses_its_target() -> None:
    never = replace(FIGURES, created_s=None, restart_converged_s=None, edit_latencies_s=())
    missed = [t for t in judge(never, ScaleTargets()) if not t.met]
    assert {t.measured for t in missed} >= {"never"}
    assert len([t for t in missed if t.measured == "never"]) == 3


def test_a_steady_window_on_a_fleet_not_at_rest_misses_and_says_what_was_moving() -> None:
    moving = replace(
        FIGURES,
        steady_requests=0,
        created_s=None,
        created_by_timeout=987,
        unsettled="4410 of 5000 pods running and 960 of 1000 services decided",
    )
    verdicts = {t.name: t for t in judge(moving, ScaleTargets())}
    steady = verdicts["steady API requests per service per minute"]
    assert not steady.met and "not at rest: 4410 of 5000 pods running" in steady.measured
    assert verdicts["all 100 Deployments exist after creation"].measured == (
        "never (987 by the run's timeout)"
    )


def test_a_lost_edit_misses_the_edit_target_however_fast_the_rest() -> None:
    fast = replace(FIGURES, edit_latencies_s=(0.1,) * 5, edits_lost=1)
    (edit,) = [t for t in judge(fast, ScaleTargets()) if "edit" in t.name]
    assert not edit.met and "1 lost" in edit.measured


def test_nearest_rank_quantiles() -> None:
    assert nearest_rank([3.0, 1.0, 2.0], 0.5) == 2.0
    assert nearest_rank([1.0] * 99 + [9.0], 0.99) == 1.0
    assert nearest_rank([1.0] * 98 + [9.0, 9.0], 0.99) == 9.0


def test_the_table_names_the_command_and_each_verdict() -> None:
    table = render_table(FIGURES, ScaleTargets(), "specops scale --services 100")
    assert "`specops scale --services 100`" in table
    assert table.count("| MISSED |") == 2 and table.count("| met |") == 4
    assert "| get deployments | 600 |" in table


LOAD = PhaseLoad(
    wall_s=100.0,
    requests=3000,
    limited=2000,
    operator_cpu_s=40.0,
    machine_cpu_s=120.0,
    capacity_cpu_s=200.0,
    limit_qps=50.0,
    limit_burst=100,
)


def test_a_phase_sending_near_its_rate_limit_is_bound_by_it() -> None:
    limited = replace(LOAD, limited=4500)  # 4500 of the 5100 it lets through in 100 s
    assert "kubeQps" in limited.bound_by()
    short = replace(LOAD, wall_s=1.0, limited=60)  # 60/s, but the burst lets 150 through
    assert "kubeQps" not in short.bound_by()
    assert "kubeQps" not in LOAD.bound_by()  # 20/s of 50/s, the CPU 60 % busy


def test_a_phase_on_a_saturated_machine_names_the_operators_share() -> None:
    saturated = replace(LOAD, machine_cpu_s=190.0, operator_cpu_s=38.0)
    assert saturated.bound_by() == (
        "this machine's CPU (95% busy, of it: the operator 20%; the rest the control plane "
        "and the fake pods)"
    )
    named = replace(saturated, components_cpu_s=(("kube-apiserver", 95.0), ("etcd", 19.0)))
    assert named.bound_by() == (
        "this machine's CPU (95% busy, of it: the operator 20%; kube-apiserver 50%; etcd 10%)"
    )
    unlimited = replace(saturated, limited=9000, limit_qps=None)  # 90/s, no limit to bind
    assert "CPU" in unlimited.bound_by()


def test_a_phase_bound_by_neither_says_so() -> None:
    assert LOAD.bound_by().startswith("neither")


def test_the_table_says_what_the_creation_cost_and_what_bound_it() -> None:
    table = render_table(replace(FIGURES, creation=LOAD), ScaleTargets(), "specops scale")
    (line,) = [row for row in table.splitlines() if row.startswith("- Creation:")]
    assert (
        "3000 operator requests in 100.0 s (30.0 per service); 2000 through its own client" in line
    )
    assert "20/s against its limit of 50/s (burst 100)" in line
    assert "the operator 40 s, the machine 120 of 200 s" in line
    assert "- Creation:" not in render_table(FIGURES, ScaleTargets(), "specops scale")


def test_the_table_says_what_the_burst_cost_and_where_the_p99_edits_time_went() -> None:
    path = EditPath("svc-3", total_s=2.3, patched_s=0.4, until_sent_s=1.5, answered_s=0.3)
    figures = replace(FIGURES, burst=LOAD, slowest_edit=path)
    table = render_table(figures, ScaleTargets(), "specops scale")
    (burst,) = [row for row in table.splitlines() if row.startswith("- The burst: 3000")]
    assert "(10.0 per service)" in burst  # the burst's 300 services
    (edit,) = [row for row in table.splitlines() if row.startswith("- The edit at p99")]
    assert "(svc-3, 2.3 s): the API server took 0.4 s to take the edit; 1.5 s more" in edit
    assert "0.3 s for the API server to answer that apply; 0.1 s until" in edit
