"""What ``specops render`` and the chart produce is what tests/golden/ holds."""

from __future__ import annotations

import pytest

from tests.golden import CASES, Case, check


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_rendering_matches_its_golden_file(case: Case) -> None:
    problem = check(case)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
