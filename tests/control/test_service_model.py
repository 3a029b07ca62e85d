"""The priors the operator and the benchmark build for a service, in one place."""

from __future__ import annotations

import pytest

from specops.control import service_model
from specops.policy import TERMS, CostEvidence, CostPosterior, StepShape
from specops.profiles import PROFILES

PROFILE = PROFILES["llama3.1-8b-h100"]
PER_POSITION = TERMS.index("per_position")


@pytest.mark.parametrize("method", ["eagle", "eagle3", "mtp", "draft_model"])
def test_a_draft_that_runs_a_pass_per_position_pays_each_pass_in_the_prior(method: str) -> None:
    prior = service_model(PROFILE, method, max_batch=256).cost
    assert prior.mean[PER_POSITION] == pytest.approx(PROFILE.draft_pass_s)
    assert 0.1e-3 < PROFILE.draft_pass_s < 0.5e-3
    cost = CostPosterior.of(prior, CostEvidence()).model()
    single = [cost.step_time(StepShape(1, k, 1024)) for k in (3, 7)]
    # Four more passes of the head, and four more drafted tokens at batch 1.
    assert single[1] - single[0] >= 4 * PROFILE.draft_pass_s


@pytest.mark.parametrize("method", ["ngram", "suffix", "dflash"])
def test_a_lookup_or_a_block_drafter_has_no_per_position_prior(method: str) -> None:
    prior = service_model(PROFILE, method, max_batch=256).cost
    assert prior.mean[PER_POSITION] == 0.0
