"""The API server's audit log read as requests: who asked, what, and when.

The benchmark counts the operator's requests from what the API server recorded, not from the
operator's own view of them (kopf's watches and patches never pass through its client)."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

__all__ = ["WRITE_VERBS", "AuditRequest", "by_kind", "parse_audit", "within"]

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True)
class AuditRequest:
    """One answered request, as the audit log's event at ResponseComplete describes it."""

    at: float
    user: str
    verb: str
    resource: str
    namespace: str
    name: str
    code: int
    agent: str = ""  # the client's User-Agent: which operator replica sent it
    done: float | None = None  # when the API server answered it (its stage's timestamp)
    manager: str = ""  # the field manager a write named (the operator has one per writer)

    @property
    def writes(self) -> bool:
        return self.verb in WRITE_VERBS


def _epoch(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def parse_audit(lines: Iterable[str]) -> Iterator[AuditRequest]:
    """The requests of the log's lines; a line cut short (the log being written) is skipped."""
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("stage") != "ResponseComplete":
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", event.get("requestURI", "?"))
        if ref.get("subresource"):
            resource = f"{resource}/{ref['subresource']}"
        yield AuditRequest(
            at=_epoch(event["requestReceivedTimestamp"]),
            user=event.get("user", {}).get("username", ""),
            verb=event.get("verb", ""),
            resource=resource,
            namespace=ref.get("namespace", ""),
            name=ref.get("name", ""),
            code=int((event.get("responseStatus") or {}).get("code", 0)),
            agent=event.get("userAgent", ""),
            done=_epoch(event["stageTimestamp"]) if event.get("stageTimestamp") else None,
            manager=_field_manager(event.get("requestURI", "")),
        )


def _field_manager(uri: str) -> str:
    """The ``fieldManager`` a request's URI names ("" when none)."""
    values = parse_qs(urlsplit(uri).query).get("fieldManager")
    return values[0] if values else ""


def within(
    requests: Iterable[AuditRequest], user: str, start: float, end: float
) -> list[AuditRequest]:
    """The requests ``user`` sent in [start, end)."""
    return [r for r in requests if r.user == user and start <= r.at < end]


def by_kind(requests: Iterable[AuditRequest], top: int = 6) -> list[tuple[str, int]]:
    """The most frequent (verb resource) pairs, for a table of where the traffic goes; a write
    names its field manager (which of the operator's writers sent it)."""
    counts = Counter(
        f"{r.verb} {r.resource}" + (f" ({r.manager})" if r.manager else "") for r in requests
    )
    return counts.most_common(top)
