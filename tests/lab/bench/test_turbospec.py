"""The per-step goodput rule learns a known step-time model and acceptance.

Step time 10 ms + 1 ms per batched token, acceptance 0.5: at batch 2 k=2 delivers most
(3.5 tokens per 16 ms), at batch 20 no speculation does (the hand-computed policy cases).
"""

from specops_lab.bench import GoodputRule
from specops_lab.sim import (
    EngineConfig,
    SimulatedEngine,
    Workload,
    load_workload,
    parse_speculative_config,
)


def _feed(rule: GoodputRule, steps: int) -> None:
    drafts = 0
    accepted = [0.0] * 7
    for i in range(steps):
        batch = 2 + (i * 7) % 30
        k = rule.select(batch, 7)
        if k:
            drafts += batch
            for pos in range(k):
                accepted[pos] += batch * 0.5 ** (pos + 1)
        rule.observe(
            batch, k, 0.010 + 0.001 * batch * (k + 1), 0, drafts, [round(a) for a in accepted]
        )


def test_goodput_rule_picks_the_k_a_known_model_favours() -> None:
    rule = GoodputRule()
    _feed(rule, 400)
    assert abs(rule.acceptance - 0.5) < 0.02
    assert rule.select(2, 7) == 2
    assert rule.select(20, 7) == 0


def test_engine_takes_k_from_the_rule_within_its_cap() -> None:
    spec = parse_speculative_config(
        '{"method": "eagle3", "model": "d", "num_speculative_tokens": 3}'
    )
    engine = SimulatedEngine(
        Workload(load_workload("sharegpt"), seed=0),
        EngineConfig(max_num_seqs=8, speculative=spec),
    )
    engine.k_selector = lambda batch, cap: 9
    engine.add_request()
    ks = {engine.step().k for _ in range(5)}
    assert ks <= {0, 3} and 3 in ks
    engine.k_selector = lambda batch, cap: 1
    assert engine.step().k == 1


def test_the_rule_as_step_rule_runs_the_same_in_stretches_as_alone() -> None:
    """Told of every step, in stretches (checked ahead on a copy) or alone: the same run."""
    spec = parse_speculative_config(
        '{"method": "eagle3", "model": "d", "num_speculative_tokens": 5}'
    )
    runs = {}
    for stepping in ("single", "bulk"):
        engine = SimulatedEngine(
            Workload(load_workload("sharegpt"), seed=1),
            EngineConfig(max_num_seqs=16, speculative=spec),
            seed=2,
            stepping=stepping,
        )
        engine.step_rule = GoodputRule()
        while engine.now < 40.0:
            for _ in range(16 - engine.num_running - engine.num_waiting):
                engine.add_request()
            engine.run_until(engine.now + 2.0, concurrency=16)
        runs[stepping] = (engine.now, engine.metrics(), engine.step_rule.acceptance)
    (now, single, acceptance), (bulk_now, bulk, bulk_acceptance) = runs["single"], runs["bulk"]
    assert bulk_now == now and bulk_acceptance == acceptance
    assert bulk.counters == single.counters
    assert bulk.accepted_per_position == single.accepted_per_position
