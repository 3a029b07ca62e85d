"""The services a restarted operator's log says it reconciled (kopf's JSON lines)."""

from __future__ import annotations

import json
from pathlib import Path

from specops_lab.scale._run import _reconciled


def test_only_handled_services_named_in_the_log_count(tmp_path: Path) -> None:
    def line(message: str, name: str | None) -> str:
        record: dict[str, object] = {"message": message, "levelname": "INFO"}
        if name is not None:
            record["object"] = {"kind": "SpeculativeService", "namespace": "f", "name": name}
        return json.dumps(record)

    log = tmp_path / "operator.log"
    log.write_text(
        "\n".join(
            [
                line("Handler 'service_changed' succeeded.", "svc-1"),
                line("Timer 'service_changed' succeeded.", "svc-2"),
                line("Handler 'service_changed' succeeded.", None),
                line("Handler 'service_changed' succeeded.", "svc-1"),
                "peering ... not JSON",
                '{"message": "Handler',  # cut short
                line("Handler 'service_changed' succeeded.", "svc-3"),
            ]
        )
    )
    assert _reconciled(log) == {"svc-1", "svc-3"}
