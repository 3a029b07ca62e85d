import pytest

from specops.policy import BatchDistribution, ScheduleRange, SpecConfig


def test_table_lookup_follows_vllm_gap_tail_and_cap() -> None:
    config = SpecConfig.table([[1, 16, 5], [32, 128, 2]], cap=4)
    assert config.k_for_batch(1) == 4  # capped by num_speculative_tokens
    assert config.k_for_batch(20) == 4  # the gap 17-31 carries the previous k
    assert config.k_for_batch(40) == 2
    assert config.k_for_batch(500) == 2  # the tail carries the last k


def test_static_and_off() -> None:
    assert SpecConfig.static(3).k_for_batch(200) == 3
    assert SpecConfig.off().k_for_batch(1) == 0
    assert SpecConfig.off().is_off


def test_vllm_documented_table_renders_as_speculative_config_keys() -> None:
    config = SpecConfig.table([[1, 16, 5], [17, 32, 4], [33, 64, 3], [65, 128, 1], [129, 512, 0]])
    assert config.as_vllm() == {
        "num_speculative_tokens": 5,
        "num_speculative_tokens_per_batch_size": [
            [1, 16, 5],
            [17, 32, 4],
            [33, 64, 3],
            [65, 128, 1],
            [129, 512, 0],
        ],
    }
    assert config.k_for_batch(100) == 1
    assert config.k_for_batch(300) == 0


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([[2, 16, 3]], "start at batch 1"),
        ([[1, 16, 3], [10, 20, 1]], "sorted and disjoint"),
    ],
)
def test_invalid_tables_are_rejected(rows: list[list[int]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpecConfig.table(rows)


def test_invalid_range_and_table_without_cap() -> None:
    with pytest.raises(ValueError, match="start <= end"):
        ScheduleRange(5, 4, 1)
    with pytest.raises(ValueError, match="num_speculative_tokens > 0"):
        SpecConfig(0, (ScheduleRange(1, 8, 1),))


def test_batch_distribution_from_samples_drops_idle_time() -> None:
    load = BatchDistribution.from_samples([0, 0, 2, 2, 2, 8])
    assert load.weights == ((2, 0.75), (8, 0.25))
    assert load.mean == pytest.approx(3.5)
    assert load.quantile(0.5) == 2
    assert load.quantile(0.9) == 8


def test_shift_distance_without_slack_is_the_ks_distance() -> None:
    a = BatchDistribution.from_weights({2: 0.5, 4: 0.5})
    b = BatchDistribution.from_weights({4: 0.5, 8: 0.5})
    # CDFs at 2, 4, 8: a = .5, 1, 1; b = 0, .5, 1
    assert a.shift_distance(b) == pytest.approx(0.5)
    assert b.shift_distance(a) == pytest.approx(0.5)
    assert a.shift_distance(a) == 0.0


def test_shift_distance_ignores_moves_within_the_slack() -> None:
    steady = BatchDistribution.from_weights({31: 0.5, 32: 0.5})
    wobble = BatchDistribution.from_weights({33: 1.0})
    doubled = BatchDistribution.from_weights({64: 1.0})
    assert steady.shift_distance(wobble) == 1.0
    assert steady.shift_distance(wobble, slack=0.25) == 0.0
    assert steady.shift_distance(doubled, slack=0.25) == 1.0
    half_moved = BatchDistribution.from_weights({32: 0.5, 64: 0.5})
    assert steady.shift_distance(half_moved, slack=0.25) == pytest.approx(0.5)


def test_unknown_load_is_rejected() -> None:
    with pytest.raises(ValueError, match="load is unknown"):
        BatchDistribution.from_samples([0, 0])


def test_mix_is_a_weighted_average() -> None:
    a = BatchDistribution.from_weights({2: 1.0}, samples=10)
    b = BatchDistribution.from_weights({4: 1.0}, samples=30)
    mixed = a.mix(b, 0.25)
    assert mixed.weights == ((2, 0.75), (4, 0.25))
    assert mixed.samples == 40


def test_acceptance_is_corrected_for_drafts_that_never_reached_a_position() -> None:
    from specops.policy import DraftCost, StepCostModel, acceptance_from_counters, draft_reach

    # constant 10 ms steps: drafts per second are proportional to weight * batch.
    cost = StepCostModel(t_fixed=0.01, c_tok=0.0, c_kv=0.0, t_overhead=0.0, draft=DraftCost())
    table = SpecConfig.table([[1, 4, 2], [5, 16, 1]])
    load = BatchDistribution.from_weights({2: 0.5, 8: 0.5})
    # drafts/s: batch 2 -> 100 (k=2), batch 8 -> 400 (k=1): position 1 reached by 1/5
    reach = draft_reach(table, load, cost, context_tokens=0)
    assert reach == pytest.approx((1.0, 0.2))
    # 1000 drafts, 600 accepted at position 0; 80 at position 1 out of the 200 that reached it
    curve = acceptance_from_counters(1000, [600, 80], reach)
    assert curve.rates == pytest.approx((0.6, 0.4))


def test_positions_no_draft_reached_are_left_unmeasured() -> None:
    from specops.policy import acceptance_from_counters

    assert acceptance_from_counters(100, [50, 0, 0], (1.0, 0.0, 0.0)).rates == (0.5,)
    with pytest.raises(ValueError, match="no drafts"):
        acceptance_from_counters(0, [0], (1.0,))
