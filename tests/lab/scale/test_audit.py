"""The audit log read as the operator's requests."""

from __future__ import annotations

import json

from specops_lab.scale import parse_audit
from specops_lab.scale._audit import by_kind, within

OPERATOR = "system:serviceaccount:specops:specops"


def _event(
    verb: str,
    resource: str,
    *,
    at: str,
    user: str = OPERATOR,
    stage: str = "ResponseComplete",
    subresource: str | None = None,
) -> str:
    ref = {"resource": resource, "namespace": "fleet", "name": "svc-1"}
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
