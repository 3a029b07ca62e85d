"""The audit log read as the operator's requests."""

from __future__ import annotations

import json

from specops_lab.scale import parse_audit
from specops_lab.scale._audit import by_kind, within
from specops_lab.scale._run import _Edit

OPERATOR = "system:serviceaccount:specops:specops"


def _event(
    verb: str,
    resource: str,
    *,
    at: str,
    user: str = OPERATOR,
    stage: str = "ResponseComplete",
    subresource: str | None = None,
    done: str | None = None,
    name: str = "svc-1",
    uri: str = "",
) -> str:
    ref = {"resource": resource, "namespace": "fleet", "name": name}
    if subresource:
        ref["subresource"] = subresource
    return json.dumps(
        {
            "kind": "Event",
            "stage": stage,
            "verb": verb,
            "user": {"username": user},
            "objectRef": ref,
            "requestReceivedTimestamp": at,
            "responseStatus": {"code": 200},
            **({"stageTimestamp": done} if done else {}),
            **({"requestURI": uri} if uri else {}),
        }
    )


def test_answered_requests_are_read_and_cut_lines_skipped() -> None:
    lines = [
        _event("get", "deployments", at="2026-12-02T10:00:00.500000Z"),
        _event("patch", "speculativeservices", at="2026-12-02T10:00:01Z", subresource="status"),
        _event("watch", "pods", at="2026-12-02T10:00:02Z", stage="ResponseStarted"),
        '{"kind": "Event", "stage": "Respo',  # the line the API server is still writing
    ]
    requests = list(parse_audit(lines))
    assert [(r.verb, r.resource) for r in requests] == [
        ("get", "deployments"),
        ("patch", "speculativeservices/status"),
    ]
    assert requests[1].at - requests[0].at == 0.5
    assert not requests[0].writes and requests[1].writes


def test_a_window_keeps_one_users_requests_and_counts_them_by_kind() -> None:
    lines = [
        _event("get", "deployments", at="2026-12-02T10:00:00Z"),
        _event("get", "deployments", at="2026-12-02T10:00:05Z"),
        _event("get", "deployments", at="2026-12-02T10:00:05Z", user="system:serviceaccount:x:y"),
        _event("list", "pods", at="2026-12-02T10:00:06Z"),
        _event("list", "pods", at="2026-12-02T10:00:10Z"),
    ]
    requests = list(parse_audit(lines))
    start = requests[0].at
    kept = within(requests, OPERATOR, start, start + 10.0)
    assert len(kept) == 3
    assert by_kind(kept) == [("get deployments", 2), ("list pods", 1)]


def test_an_edits_time_is_split_at_the_operators_first_apply_of_its_deployment() -> None:
    lines = [
        _event("get", "deployments", at="2026-12-02T10:00:00.600000Z", name="svc-7"),
        _event("patch", "deployments", at="2026-12-02T10:00:00.700000Z", name="svc-8"),
        _event(
            "patch",
            "deployments",
            at="2026-12-02T10:00:00.900000Z",
            done="2026-12-02T10:00:01.200000Z",
            name="svc-7",
        ),
        _event("patch", "deployments", at="2026-12-02T10:00:01.500000Z", name="svc-7"),
    ]
    requests = list(parse_audit(lines))
    sent = requests[0].at - 0.5  # the admin's PATCH left at 10:00:00.1
    path = _Edit("svc-7", sent_at=sent, patched_s=0.2, seen_s=1.3).path(requests)
    assert path is not None
    # 0.2 s to take the edit, 0.6 s more until the apply arrived, 0.3 s for its answer.
    assert (path.patched_s, round(path.until_sent_s, 3), round(path.answered_s, 3)) == (
        0.2,
        0.6,
        0.3,
    )
    assert round(path.seen_s, 3) == 0.2
    assert _Edit("svc-9", sent_at=sent, patched_s=0.2, seen_s=1.3).path(requests) is None


def test_a_write_is_counted_under_its_field_manager() -> None:
    status = "/apis/specops.io/v1alpha1/namespaces/fleet/speculativeservices/svc-1/status"
    lines = [
        _event(
            "patch",
            "speculativeservices",
            at="2026-12-02T10:00:00Z",
            subresource="status",
            uri=f"{status}?fieldManager=specops-controller&force=true",
        ),
        _event(
            "patch",
            "speculativeservices",
            at="2026-12-02T10:00:01Z",
            subresource="status",
            uri=f"{status}?force=true&fieldManager=specops-reconciler",
        ),
        _event("get", "deployments", at="2026-12-02T10:00:02Z", uri="/apis/apps/v1/x"),
    ]
    assert sorted(by_kind(parse_audit(lines))) == [
        ("get deployments", 1),
        ("patch speculativeservices/status (specops-controller)", 1),
        ("patch speculativeservices/status (specops-reconciler)", 1),
    ]
