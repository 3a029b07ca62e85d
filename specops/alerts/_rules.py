"""The specops alert rules as data: one source for the plain rule file and the PrometheusRule.

Every service alert groups by ``namespace`` and ``service`` (the SpeculativeService), so
it names the service to look at, and reads only specops's own series: its own metric names,
or vLLM's and ``up`` from the job its PodMonitor sets (a vLLM that specops does not manage,
or any other target with a ``service`` label, never fires them). The operator's alerts read
the job of the chart's ServiceMonitor. Every alert links its runbook
(``docs/runbooks.md``). The PromQL shared with the dashboards comes from
:mod:`specops.dashboards`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specops import dashboards as q

__all__ = [
    "ACCEPTANCE_LENGTH",
    "TPOT_MEAN",
    "Alert",
    "Recording",
    "RuleGroup",
    "rule_groups",
    "rules_document",
]

BY_SERVICE = ("namespace", "service")
PODS = f'job="{q.PODS_JOB}"'
OPERATOR = f'job="{q.OPERATOR_JOB}"'
RUNBOOKS = "https://github.com/specops/specops/blob/main/docs/runbooks.md"
ACCEPTANCE_LENGTH = "specops:acceptance_length:rate5m"
TPOT_MEAN = "specops:time_per_output_token_seconds:mean5m"
DRAFTS_RATE = "specops:spec_decode_drafts:rate5m"


@dataclass(frozen=True)
class Recording:
    """A recording rule: ``record`` holds the value of ``expr`` for the alerts to share."""

    record: str
    expr: str

    def to_rule(self) -> dict[str, Any]:
        return {"record": self.record, "expr": self.expr}


@dataclass(frozen=True)
class Alert:
    """An alerting rule with the annotations an on-call engineer reads first."""

    name: str
    expr: str
    for_: str
    severity: Literal["info", "warning", "critical"]
    summary: str
    description: str

    @property
    def runbook_url(self) -> str:
        """The alert's section of the runbook page (GitHub's anchor for its heading)."""
        return f"{RUNBOOKS}#{self.name.lower()}"

    def to_rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_ != "0m":
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": self.runbook_url,
        }
        return rule


@dataclass(frozen=True)
class RuleGroup:
    name: str
    rules: tuple[Recording | Alert, ...]


def _recordings() -> RuleGroup:
    return RuleGroup(
        "specops.recording",
        (
            Recording(ACCEPTANCE_LENGTH, q.acceptance_length(PODS, "5m", BY_SERVICE)),
            Recording(TPOT_MEAN, q.histogram_mean(q.VLLM_TPOT, PODS, "5m", BY_SERVICE)),
            Recording(DRAFTS_RATE, q.rate_sum(q.VLLM_DRAFTS, PODS, "5m", BY_SERVICE)),
        ),
    )


def _alerts() -> RuleGroup:
    service = "{{ $labels.namespace }}/{{ $labels.service }}"
    return RuleGroup(
        "specops.alerts",
        (
            Alert(
                name="SpecopsAcceptanceCollapsed",
                expr=(
                    f"(\n  {ACCEPTANCE_LENGTH} < 1.2\n"
                    f"  or\n  {ACCEPTANCE_LENGTH}\n"
                    f"    < 1 + 0.5 * (avg_over_time({ACCEPTANCE_LENGTH}[6h] offset 30m) - 1)\n"
                    f")\nand {DRAFTS_RATE} > 0"
                ),
                for_="15m",
                severity="warning",
                summary="Draft tokens of {{ $labels.namespace }}/{{ $labels.service }} "
                "are hardly accepted any more.",
                description=(
                    f"The mean acceptance length of {service} is "
                    '{{ $value | printf "%.2f" }}, either below 1.2 or its accepted tokens '
                    "per draft fell to under half of the level of the previous six hours. "
                    "The draft model now costs compute for little gain: check that the "
                    "draft matches the target model and whether the traffic changed."
                ),
            ),
            Alert(
                name="SpecopsSpeculationSlowingService",
                expr=(
                    f"{TPOT_MEAN}\n"
                    f"  > on (namespace, service)\n"
                    f'    1.1 * max by (namespace, service) ({q.SIDECAR_PREDICTED_TPOT}{{k="0"}})\n'
                    f"and {DRAFTS_RATE} > 0"
                ),
                for_="15m",
                severity="warning",
                summary="Speculation makes {{ $labels.namespace }}/{{ $labels.service }} "
                "slower than no speculation would.",
                description=(
                    f"The measured time per output token of {service} is "
                    "{{ $value | humanizeDuration }}, more than 10% above the sidecar's "
                    "prediction for the same load without speculation. The load is probably "
                    "above the crossover: in Auto mode specops shortens or turns off "
                    "speculation once the regime is confirmed; in Advise or Fixed mode, "
                    "apply the recommendation."
                ),
            ),
            Alert(
                name="SpecopsMetricsStale",
                expr=(
                    f"max by (namespace, service) ({q.SIDECAR_METRICS_AGE}) > 120\n"
                    f"or\ncount by (namespace, service) (up{{{PODS}}} == 0) > 0"
                ),
                for_="5m",
                severity="warning",
                summary="specops has no fresh metrics for "
                "{{ $labels.namespace }}/{{ $labels.service }}.",
                description=(
                    f"The engine or sidecar metrics of {service} are stale or cannot be "
                    "scraped. The controller withholds every decision until they are "
                    "fresh again; check the pods, their /metrics endpoints and the "
                    "PodMonitor."
                ),
            ),
            Alert(
                name="SpecopsReconfigurationsFlapping",
                expr=(
                    "sum by (namespace, service) "
                    f"(increase({q.OPERATOR_RECONFIGURATIONS}[1h])) >= 3"
                ),
                for_="0m",
                severity="warning",
                summary="{{ $labels.namespace }}/{{ $labels.service }} was reconfigured "
                '{{ $value | printf "%.0f" }} times in an hour.',
                description=(
                    f"Each reconfiguration of {service} restarts its pods. This many in an "
                    "hour means the load swings across a crossover faster than the "
                    "hysteresis absorbs: raise the minimum dwell time or the gain margin, "
                    "or pin the config with mode Fixed."
                ),
            ),
            Alert(
                name="SpecopsRolloutRolledBack",
                expr=(f"sum by (namespace, service) (increase({q.OPERATOR_ROLLBACKS}[30m])) > 0"),
                for_="0m",
                # The rollback already restored a config that served: look, but no page.
                severity="warning",
                summary="A new speculative config of {{ $labels.namespace }}/"
                "{{ $labels.service }} was rolled back.",
                description=(
                    f"Pods of {service} running the new speculative config did not become "
                    "Ready in time, so specops restored the previous config and holds off "
                    "further changes during its cooldown. See the SpeculativeService's "
                    "events and the new pods' logs (e.g. out of GPU memory for the draft "
                    "model)."
                ),
            ),
        ),
    )


def _operator_alerts() -> RuleGroup:
    operator = "the specops operator in {{ $labels.namespace }}"
    reconciles = f"{q.OPERATOR_RECONCILES}{{{OPERATOR}"
    return RuleGroup(
        "specops.operator",
        (
            Alert(
                name="SpecopsOperatorDown",
                expr=f"absent(up{{{OPERATOR}}} == 1)",
                for_="10m",
                severity="warning",
                summary="The specops operator is down or not scraped.",
                description=(
                    "No specops operator has answered a scrape for 10 minutes. The vLLM pods "
                    "keep serving with the speculative config they run, but nothing retunes "
                    "it, and a new config that fails is not rolled back. Check the operator's "
                    "pods and the chart's ServiceMonitor."
                ),
            ),
            Alert(
                name="SpecopsOperatorReconcileFailing",
                expr=(
                    f'sum by (namespace) (rate({reconciles}, result="error"}}[10m]))\n'
                    f"  / sum by (namespace) (rate({reconciles}}}[10m])) > 0.5"
                ),
                for_="15m",
                severity="warning",
                summary="Most reconciliations of the specops operator fail.",
                description=(
                    f"More than half of the reconciliations of {operator} failed over the last "
                    "15 minutes: SpeculativeServices do not get the Deployments their spec "
                    "asks for. The operator's log and the services' Degraded conditions and "
                    "Warning Events say why (often RBAC, or the API server refusing an object)."
                ),
            ),
        ),
    )


def rule_groups() -> tuple[RuleGroup, ...]:
    """The recording rules first, then the alerts that read them, then the operator's own."""
    return (_recordings(), _alerts(), _operator_alerts())


def rules_document() -> dict[str, Any]:
    """The rule file's content, in Prometheus's rule file format."""
    return {
        "groups": [
            {"name": group.name, "rules": [rule.to_rule() for rule in group.rules]}
            for group in rule_groups()
        ]
    }
