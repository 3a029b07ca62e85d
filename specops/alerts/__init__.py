"""Prometheus alert rules as code, generated into the chart and deploy/ by ``specops alerts``."""

from __future__ import annotations

from specops.alerts._generate import RULE_FILES, render_rules, stale_rule_files, write_rule_files
from specops.alerts._rules import (
    ACCEPTANCE_LENGTH,
    TPOT_MEAN,
    Alert,
    Recording,
    RuleGroup,
    rule_groups,
    rules_document,
)

__all__ = [
    "ACCEPTANCE_LENGTH",
    "RULE_FILES",
    "TPOT_MEAN",
    "Alert",
    "Recording",
    "RuleGroup",
    "render_rules",
    "rule_groups",
    "rules_document",
    "stale_rule_files",
    "write_rule_files",
]
