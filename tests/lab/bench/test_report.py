from dataclasses import replace

import pytest
from specops_lab.bench import (
    DecisionRecord,
    LoadTrace,
    RunResult,
    Segment,
    SegmentStats,
    TraceResults,
    decision_cost,
    evaluate_targets,
    markdown,
    oracle,
    results_json,
)


def _stats(name: str, tokens: int, slo_share: float = 1.0, seconds: float = 10.0) -> SegmentStats:
    return SegmentStats(
        name=name,
        start=0.0,
        end=seconds,
        tokens=tokens,
        tpots=(0.01,),
        finished_tokens=100,
        slo_tokens=round(100 * slo_share),
    )


def _run(policy: str, tokens: tuple[int, int], restarts: int = 0) -> RunResult:
    segments = tuple(_stats(f"s{i}", t) for i, t in enumerate(tokens))
    return RunResult(policy, "t", segments, restarts, (), (), "llama3.1-8b-h100-eagle3")


def _runs(
    segments: dict[str, tuple[tuple[int, float, float], ...]],
    timelines: dict[str, tuple[tuple[float, int, int], ...]],
) -> dict[str, RunResult]:
    """A fixed-config run per policy from its segments' (tokens, seconds, share within
    the TPOT target), with the timeline of what the engine ran where one is given."""
    return {
        name: RunResult(
            name,
            "t",
            tuple(
                _stats(f"s{i}", tokens, slo_share=share, seconds=seconds)
                for i, (tokens, seconds, share) in enumerate(parts)
            ),
            0,
            timelines.get(name, ()),
            (),
            "llama3.1-8b-h100-eagle3",
        )
        for name, parts in segments.items()
    }


def _trace(*segments: tuple[float, int]) -> LoadTrace:
    """A ShareGPT trace of (seconds, concurrency) segments."""
    return LoadTrace(
        name="t",
        workload="sharegpt",
        segments=tuple(Segment(duration_s=d, concurrency=c) for d, c in segments),
    )


TRACE = LoadTrace(
    name="t",
    workload="sharegpt",
    segments=(Segment(duration_s=10, concurrency=4), Segment(duration_s=10, concurrency=64)),
)


def test_oracle_takes_the_best_fixed_config_per_segment() -> None:
    runs = {
        "k1": _run("k1", (100, 300)),
        "k3": _run("k3", (200, 100)),
        "specops": _run("specops", (190, 280), 1),
    }
    results = oracle(TRACE, runs, ["k1", "k3"])
    assert results.oracle_choices == ("k3", "k1")
    assert results.summary("oracle").throughput == (200 + 300) / 20
    assert results.summary("specops").restarts == 1


def test_goodput_counts_only_tokens_within_the_target() -> None:
    assert _stats("s", 1000, slo_share=0.25).goodput == 1000 / 10 * 0.25


def test_mixed_targets_compare_with_oracle_static_and_regime_changes() -> None:
    runs = {
        "k1": _run("k1", (100, 300)),
        "k3": _run("k3", (200, 100)),
        "specops": _run("specops", (190, 280), 2),
    }
    targets = {t.target: t for t in evaluate_targets([oracle(TRACE, runs, ["k1", "k3"])])}
    assert not targets["mixed: >= 0.95 of the oracle's goodput"].passed  # 470 / 500 = 0.94
    assert targets["mixed: ahead of the best single static k"].passed  # 470 > 400
    assert not targets["no flapping: <= 1 reconfiguration per load-regime change"].passed


def test_speculation_must_go_off_and_back_on_within_three_windows() -> None:
    trace = _trace((600, 4), (600, 200), (600, 4))

    def run(
        policy: str, tokens: tuple[int, int, int], timeline: tuple[tuple[float, int, int], ...] = ()
    ) -> RunResult:
        segments = tuple(_stats(f"s{i}", t) for i, t in enumerate(tokens))
        return RunResult(policy, "t", segments, 0, timeline, (), "llama3.1-8b-h100-eagle3")

    # off at 600 + 200 s (in time), back on only at 1200 + 400 s (late: 3 x 60 + 60 = 240 s)
    timeline = ((100.0, 4, 3), (800.0, 200, 0), (1300.0, 4, 0), (1600.0, 4, 3))
    runs = {
        "off": run("off", (100, 300, 100)),
        "k3": run("k3", (200, 100, 200)),
        "specops": run("specops", (200, 290, 150), timeline),
    }
    targets = evaluate_targets([oracle(trace, runs, ["off", "k3"])], window_s=60, restart_s=60)
    found = {t.trace: t for t in targets if t.target.startswith("crossover")}
    assert found["t:1:c200"].passed and "after 200 s" in found["t:1:c200"].detail
    assert not found["t:2:c4"].passed and "after 400 s" in found["t:2:c4"].detail


def test_a_steady_run_may_move_once_from_day_zero_but_not_twice() -> None:
    trace = TRACE.model_copy(update={"sweep": True})

    def move(at: float) -> DecisionRecord:
        return DecisionRecord(at, "Reconfigure", "off", "off", 0.1, "load is high")

    def targets(*moves: float) -> bool:
        runs = {
            "k1": _run("k1", (100, 300)),
            "specops": RunResult(
                "specops",
                "t",
                _run("k1", (100, 300)).segments,
                len(moves),
                (),
                tuple(move(at) for at in moves),
                "llama3.1-8b-h100-eagle3",
            ),
        }
        found = {t.target: t for t in evaluate_targets([oracle(trace, runs, ["k1"])])}
        return found["no flapping: <= 1 reconfiguration per steady run (from day zero)"].passed

    assert targets()
    assert targets(3.0, 14.0)  # one in each of the two runs
    assert not targets(3.0, 6.0)  # twice in the first


def test_back_on_is_expected_only_where_it_pays_its_restarts_on_the_truth() -> None:
    """A short low segment between two high ones: drafting gains there, but the restart
    back to off at high load costs more, so the plan that pays restarts stays off and the
    controller that stays off is not marked down; a long one pays, and is expected."""

    def case(low_s: float) -> list[str]:
        trace = _trace((600, 200), (low_s, 4), (600, 200))
        goodput = {"off": (1000.0, 100.0, 1000.0), "k3": (50.0, 200.0, 50.0)}
        seconds = (600.0, low_s, 600.0)
        runs = _runs(
            {
                name: tuple((round(g * t), t, 1.0) for g, t in zip(rates, seconds, strict=True))
                for name, rates in goodput.items()
            },
            {"off": ((10.0, 200, 0),)},
        )
        runs["specops"] = replace(runs["off"], policy="specops")
        results = oracle(trace, runs, ["off", "k3"], runnable=["off", "k3"], restart_s=60)
        assert results.oracle_choices == ("off", "k3", "off")
        targets = evaluate_targets([results], window_s=60, restart_s=60)
        return [t.trace for t in targets if t.target.startswith("crossover: speculation back")]

    # 600 s at 200 instead of 100 gains 60 000 tokens; the restart back to off costs 60 000
    # at 1000/s and the one into k3 12 000 more: stay off.
    assert case(600.0) == []
    assert case(3000.0) == ["t:1:c4"]  # 300 000 gained: turn on


def test_off_is_expected_only_where_it_pays_its_restarts_on_the_truth() -> None:
    """An overload no config serves within the TPOT target: the oracle picks off on
    throughput, but going off serves no more goodput, so the plan that pays restarts stays
    on and the controller that stays on is not marked down; where off serves more goodput
    than its restart costs, it is expected."""

    def case(high_share: float) -> list[str]:
        trace = _trace((600, 4), (600, 256))
        runs = _runs(
            {
                "off": ((60_000, 600.0, 1.0), (600_000, 600.0, high_share)),
                "k3": ((120_000, 600.0, 1.0), (540_000, 600.0, 0.0)),
            },
            {"k3": ((10.0, 4, 3),)},
        )
        runs["specops"] = replace(runs["k3"], policy="specops")
        results = oracle(
            trace, runs, ["off", "k3"], runnable=["off", "k3"], restart_s=60, start="k3"
        )
        assert results.oracle_choices == ("k3", "off")
        targets = evaluate_targets([results], window_s=60, restart_s=60)
        return [t.trace for t in targets if t.target.startswith("crossover: speculation off")]

    assert case(0.0) == []  # no goodput either way: off is the oracle's on throughput alone
    assert case(1.0) == ["t:1:c256"]  # 1000/s of goodput against none: off is expected


def test_the_reachable_plan_starts_at_day_zero_and_pays_each_restart() -> None:
    """From day zero's k3, leaving it in the first segment loses the restart's share of
    that segment: the plan and its goodput say so, and the mixed target reports the
    controller against it beside the oracle that switches for free."""
    runs = {
        "k1": _run("k1", (100, 300)),
        "k3": _run("k3", (200, 100)),
        "specops": _run("specops", (190, 280), 1),
    }
    free = oracle(TRACE, runs, ["k1", "k3"], runnable=["k1", "k3"], restart_s=3)
    assert free.restart_plan == ("k3", "k1")  # 200 + 300 - 3 s at 30/s, over k1's 400
    assert free.reachable_goodput == (200 + 300 - 90) / 20

    from_k1 = oracle(TRACE, runs, ["k1", "k3"], runnable=["k1", "k3"], restart_s=3, start="k1")
    # k3 first costs another 3 s at 20/s: 350, and k1 throughout (400) wins
    assert from_k1.restart_plan == ("k1", "k1")
    assert from_k1.reachable_goodput == 400 / 20

    target = next(
        t
        for t in evaluate_targets([from_k1])
        if t.target == "mixed: >= 0.95 of the oracle's goodput"
    )
    # oracle 25 tok/s, reachable 20, specops 23.5
    assert "reaches 0.800 of it, specops 1.175 of that" in target.detail
    static = next(
        t
        for t in evaluate_targets([free])
        if t.target == "mixed: ahead of the best single static k"
    )
    # k1 throughout serves 20 tok/s; from day zero's k3 the best plan serves 20.5
    assert static.passed and "best plan from day zero 20 (+2.5%)" in static.detail


def test_without_a_runnable_config_there_is_no_reachable_figure() -> None:
    runs = {"k1": _run("k1", (100, 300)), "specops": _run("specops", (190, 280))}
    results = oracle(TRACE, runs, ["k1"])
    assert results.restart_plan == () and results.reachable_goodput is None


def test_the_reachable_plan_serves_a_window_with_the_config_before_each_change() -> None:
    """A controller sees a window of the new load before it restarts: the plan keeps the
    config before for ``react_s`` of the segment, then loses the restart."""
    runs = {"k1": _run("k1", (10, 300)), "k3": _run("k3", (200, 10))}
    at_once = oracle(TRACE, runs, ["k1", "k3"], runnable=["k1", "k3"], restart_s=3)
    late = oracle(TRACE, runs, ["k1", "k3"], runnable=["k1", "k3"], restart_s=3, react_s=2)
    assert at_once.restart_plan == late.restart_plan == ("k3", "k1")
    assert at_once.reachable_goodput == (200 + 7 * 30) / 20
    # 2 s more of k3 at 1 tok/s, then 3 s of restart, then 5 s of k1 at 30 tok/s
    assert late.reachable_goodput == (200 + 2 * 1 + 5 * 30) / 20


def test_steady_targets_hold_the_controller_to_off_and_to_the_best_static_config() -> None:
    """The per-step rule is the oracle's, not a static config; where nothing meets the
    TPOT target at all, the controller is not below anything."""
    trace = TRACE.model_copy(update={"sweep": True})
    runs = {
        "off": _run("off", (100, 0)),
        "k3": _run("k3", (200, 0)),
        "turbospec": _run("turbospec", (300, 0)),
        "specops": _run("specops", (195, 0)),
    }
    found = {
        (t.target, t.trace): t
        for t in evaluate_targets([oracle(trace, runs, ["off", "k3", "turbospec"])])
    }
    assert found[("steady: never more than 2% below no speculation", "t@c4")].passed
    best = found[("steady: within 3% of the best static config", "t@c4")]
    assert best.passed and "(k3, 20)" in best.detail  # 19.5 of 20, not of turbospec's 30
    nothing = found[("steady: within 3% of the best static config", "t@c64")]
    assert nothing.passed and "no config meets the target" in nothing.detail
    assert found[("steady: never more than 2% below no speculation", "t@c64")].passed


def test_the_decision_cost_pools_every_controlled_run_and_names_the_fleet_a_core_carries() -> None:
    def results(cpu: tuple[float, ...]) -> TraceResults:
        runs = {
            "k1": _run("k1", (100, 300)),
            "specops": replace(_run("specops", (190, 280)), decide_cpu_s=cpu),
        }
        return oracle(TRACE, runs, ["k1"])

    both = [results((0.1, 0.3)), results((0.2,) * 98)]
    cost = decision_cost(both)
    assert cost is not None and cost.decisions == 100
    assert cost.mean_s == pytest.approx(0.2) and cost.max_s == 0.3
    assert cost.median_s == 0.2 and cost.services_per_core(60.0) == 60.0 / cost.mean_s
    text = markdown(both, [], "specops bench", 60.0)
    assert "100 decisions of specops" in text and "about 300 services" in text
    assert results_json(both, [], "specops bench")["decision_cpu"] == {
        "decisions": 100,
        "mean_s": cost.mean_s,
        "median_s": 0.2,
        "p99_s": cost.p99_s,
        "max_s": 0.3,
    }
    assert decision_cost([results(())]) is None


def test_mixed_targets_report_a_baseline_without_goodput_instead_of_dividing_by_it() -> None:
    """Where no request meets the TPOT target, the oracle, the best static k and vLLM's
    table serve no goodput: the targets say so rather than divide by zero."""
    none = {
        name: RunResult(
            name,
            "t",
            tuple(_stats(f"s{i}", 100, slo_share=0.0) for i in range(2)),
            0,
            (),
            (),
            "llama3.1-8b-h100-eagle3",
        )
        for name in ("off", "k1", "vllm-table", "specops")
    }
    results = oracle(TRACE, none, ["off", "k1", "vllm-table"], runnable=["off", "k1"])
    targets = {t.target: t for t in evaluate_targets([results])}
    assert "oracle 0: no config meets the TPOT target" in (
        targets["mixed: >= 0.95 of the oracle's goodput"].detail
    )
    static = targets["mixed: ahead of the best single static k"]
    table = targets["mixed: ahead of vLLM's documented table"]
    assert not static.passed and "no goodput within the TPOT target" in static.detail
    assert not table.passed and "no goodput within the TPOT target" in table.detail
    assert "| specops |" in markdown([results], list(targets.values()), "bench", 60.0)


def test_a_restart_longer_than_its_segment_keeps_the_next_one_down() -> None:
    """A 15 s restart ordered at the start of a 10 s segment serves nothing there and the
    first 5 s of the next: the plan that pays it does not get the change for free."""
    runs = {"k1": _run("k1", (100, 400)), "k3": _run("k3", (200, 100))}
    results = oracle(TRACE, runs, ["k1", "k3"], runnable=["k1", "k3"], restart_s=15, start="k3")
    # changing at once: nothing, then 5 s of k1 at 40/s = 200, under k3's 200 + 100
    assert results.restart_plan == ("k3", "k3")
    assert results.reachable_goodput == 300 / 20
