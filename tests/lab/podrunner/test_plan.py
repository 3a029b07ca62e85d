"""Desired against running: start, stop, and restart after a back-off; readiness marks."""

from __future__ import annotations

from typing import Any

import pytest
from specops_lab.cluster import ENGINE_READY_ANNOTATION
from specops_lab.podrunner import (
    SERVICE_LABEL,
    Actions,
    PodKey,
    ProbeState,
    Running,
    parse_pod,
    plan_actions,
    probed,
    readiness_marks,
    released_pods,
    restart_backoff_s,
    startable_pods,
    stop_times,
    wanted_pods,
)

from tests.lab.podrunner.pods import llama_deployment, pod_of

NODES = frozenset({"kwok-gpu-0", "kwok-gpu-1"})


def _pod(name: str, **changes: Any) -> Any:
    return pod_of(llama_deployment(), name, uid=f"uid-{name}", **changes)


def test_only_labelled_scheduled_live_pods_on_fake_nodes_are_wanted() -> None:
    unlabelled = _pod("unlabelled")
    del unlabelled["metadata"]["labels"][SERVICE_LABEL]
    terminating = _pod("terminating")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pods = [
        _pod("a"),
        _pod("b", node="kwok-gpu-1", phase="Pending"),
        _pod("pending", node=None, phase="Pending"),
        _pod("elsewhere", node="real-node"),
        _pod("done", phase="Succeeded"),
        _pod("failed", phase="Failed"),
        unlabelled,
        terminating,
    ]
    wanted = wanted_pods([parse_pod(p) for p in pods], NODES)
    assert sorted(key.name for key in wanted) == ["a", "b"]


def test_terminating_claimed_pods_are_released_once_nothing_of_theirs_runs() -> None:
    claimed = {ENGINE_READY_ANNOTATION: "false"}

    def terminating(name: str, **changes: Any) -> Any:
        pod = _pod(name, **changes)
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return pod

    pods = [
        terminating("stopped", annotations=claimed),
        terminating("draining", annotations=claimed),
        terminating("unclaimed"),  # kwok's own pod-delete stage deletes it
        terminating("elsewhere", node="real-node", annotations=claimed),
        _pod("live", annotations=claimed),
    ]
    parsed = [parse_pod(p) for p in pods]
    holding = {p.key for p in parsed if p.metadata.name in ("draining", "live")}
    assert [k.name for k in released_pods(parsed, NODES, holding)] == ["stopped"]


def test_a_pod_starts_once_it_has_an_address_no_other_pod_still_holds() -> None:
    pods = {
        p.key: p
        for p in (
            parse_pod(_pod("held")),
            parse_pod(_pod("free", ip="127.1.0.2")),
            parse_pod(_pod("taken", ip="127.1.0.3")),
            parse_pod(_pod("unaddressed", ip=None)),
        )
    }
    held = [k for k in pods if k.name == "held"]
    started = startable_pods(pods, held, busy_ips={"127.200.0.1", "127.1.0.3"})
    assert sorted(k.name for k in started) == ["free", "held"]


def test_new_pods_start_and_gone_pods_stop() -> None:
    a, b, c = (PodKey("ns", n, f"uid-{n}") for n in "abc")
    actions = plan_actions({a, c}, {a: Running(alive=True), b: Running(alive=True)}, now=0.0)
    assert actions == Actions(start=(c,), stop=(b,))


def test_a_replaced_pod_of_the_same_name_is_stopped_and_its_successor_started() -> None:
    old, new = PodKey("ns", "p", "uid-1"), PodKey("ns", "p", "uid-2")
    assert plan_actions({new}, {old: Running(alive=True)}, now=0.0) == Actions(
        start=(new,), stop=(old,)
    )


def test_nothing_to_do_is_false() -> None:
    key = PodKey("ns", "p", "u")
    assert not plan_actions({key}, {key: Running(alive=True)}, now=100.0)


def test_dead_pods_restart_after_a_doubling_back_off() -> None:
    key = PodKey("ns", "p", "u")
    first = Running(alive=False, exited_at=100.0, restarts=0)
    assert plan_actions({key}, {key: first}, now=100.0 + restart_backoff_s(0) - 0.1).restart == ()
    assert plan_actions({key}, {key: first}, now=100.0 + restart_backoff_s(0)).restart == (key,)
    assert restart_backoff_s(1) == 2 * restart_backoff_s(0)
    assert restart_backoff_s(30) == restart_backoff_s(31)


def test_a_dead_pod_that_is_no_longer_wanted_is_stopped_not_restarted() -> None:
    key = PodKey("ns", "p", "u")
    actions = plan_actions(set(), {key: Running(alive=False, exited_at=0.0)}, now=1e6)
    assert actions == Actions(stop=(key,))


def _marked(name: str, value: str | None) -> Any:
    annotations = {} if value is None else {ENGINE_READY_ANNOTATION: value}
    return parse_pod(_pod(name, annotations=annotations))


def test_readiness_is_written_where_the_annotation_disagrees_with_the_probes() -> None:
    pods = [
        _marked("loading", None),
        _marked("loaded", None),
        _marked("ready", "true"),
        _marked("died", "true"),
        _marked("still-dead", "false"),
        _marked("back", "false"),
        _marked("odd-value", "yes"),
        _marked("not-held", "true"),
    ]
    ready = {
        pods[0].key: False,
        pods[1].key: True,
        pods[2].key: True,
        pods[3].key: False,
        pods[4].key: False,
        pods[5].key: True,
        pods[6].key: True,
    }
    marks = readiness_marks(pods, ready)
    assert [(key.name, value) for key, value in marks] == [
        ("back", True),
        ("died", False),
        ("loaded", True),
        ("loading", False),
        ("odd-value", True),
    ]
    assert not readiness_marks(pods, {})


@pytest.mark.parametrize(
    ("pre_stop_s", "grace_s", "term_after_s", "kill_after_s"),
    [
        (5.0, 120.0, 5.0, 120.0),  # preStop sleep, SIGTERM, drain until the grace period ends
        (0.0, 30.0, 0.0, 30.0),  # no hook: SIGTERM at once
        (60.0, 30.0, 30.0, 32.0),  # a hook overrunning the grace period is cut, 2 s more
        (0.0, 0.0, 0.0, 2.0),
    ],
)
def test_a_stopping_container_is_signalled_on_the_kubelets_schedule(
    pre_stop_s: float, grace_s: float, term_after_s: float, kill_after_s: float
) -> None:
    times = stop_times(pre_stop_s, grace_s)
    assert (times.term_after_s, times.kill_after_s) == (term_after_s, kill_after_s)


def test_readiness_needs_a_success_and_is_lost_only_after_failures_in_a_row() -> None:
    state = ProbeState()
    assert not probed(state, ok=False, failure_threshold=3).ready  # never ready yet
    state = probed(state, ok=True, failure_threshold=3)
    assert state.ready
    for _ in range(2):  # one slow answer, then another: still Ready
        state = probed(state, ok=False, failure_threshold=3)
        assert state.ready
    assert probed(probed(state, ok=True, failure_threshold=3), False, 3).ready  # count restarts
    assert not probed(state, ok=False, failure_threshold=3).ready  # the third in a row
