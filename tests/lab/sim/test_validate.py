from pathlib import Path

import pytest
from specops_lab.sim import DEFAULT_TRUTH, load_truth
from specops_lab.sim._validate import (
    EAGLE3_PAPER,
    VLLM_TABLE,
    SpeedupTable,
    TruthValidation,
    documented_k,
    eagle3_paper_checks,
    load_truths,
    measure_speedups,
    render_markdown,
    validate_truth,
    vllm_table_checks,
    write_report,
)


@pytest.fixture(scope="module")
def table() -> SpeedupTable:
    # A small sample, for the shape: the published figures are checked on the report's own.
    return measure_speedups(
        truth=load_truth(DEFAULT_TRUTH),
        batches=(1, 2, 8, 16, 32, 64, 128, 256),
        requests_per_slot=1,
        min_requests=48,
        jobs=2,
    )


def test_processes_measure_the_same_table() -> None:
    def measured(jobs: int) -> SpeedupTable:
        return measure_speedups(
            truth=load_truth(DEFAULT_TRUTH),
            batches=(1, 8),
            ks=(1, 3),
            requests_per_slot=1,
            min_requests=8,
            jobs=jobs,
        )

    assert measured(1) == measured(2)


def test_speculation_pays_at_small_batch(table: SpeedupTable) -> None:
    assert table.speedup[1][3] > 1.3
    assert table.speedup[1][5] > 1.3


def test_speedup_falls_with_batch(table: SpeedupTable) -> None:
    for k in (1, 3, 5):
        assert table.speedup[1][k] > table.speedup[32][k] > table.speedup[256][k]


def test_best_k_falls_from_the_tables_first_row_to_its_last(table: SpeedupTable) -> None:
    assert table.best_k(1) == documented_k(1) == 5
    assert table.best_k(256) == documented_k(256) == 0


def test_the_checks_pass_within_one_k_and_within_ten_percent() -> None:
    speedup = {
        1: {1: 1.2, 5: 1.6},
        2: {1: 1.5, 5: 1.99},
        64: {1: 1.1, 5: 1.05},
        256: {1: 0.9, 5: 0.8},
    }
    lengths = {b: dict.fromkeys(row, 2.0) for b, row in speedup.items()}
    table = SpeedupTable("t", "w", speedup, lengths)
    assert [(c.batch, c.published, c.measured, c.passed) for c in vllm_table_checks(table)] == [
        (1, 5, 5, True),
        (2, 5, 5, True),
        (64, 3, 1, False),
        (256, 0, 0, True),
    ]
    # 1.99 is 9.9 % above the paper's 1.81 at batch 2; 1.1 is 20 % below its 1.38 at 64
    assert [(c.batch, c.passed) for c in eagle3_paper_checks(table)] == [(2, True), (64, False)]
    text = render_markdown(TruthValidation(load_truth(DEFAULT_TRUTH), table, {}))
    assert "vLLM table 3/4 pass (FAIL at batch 64); EAGLE-3 paper 1/2 pass (FAIL at batch 64)" in (
        text
    )
    assert "| 64 | 1.10 | 1.05 | 1 | 2.00 | 3 | FAIL | 1.10 | 1.38 | -20% FAIL |" in text


@pytest.mark.integration
def test_the_default_truth_passes_both_published_checks_at_every_batch() -> None:
    """vLLM's best k by batch within one and the EAGLE-3 paper within 10 %, measured as the
    report measures them (minutes: hundreds of requests per batch and k)."""
    table = measure_speedups(truth=load_truth(DEFAULT_TRUTH), jobs=2)
    paper = eagle3_paper_checks(table)
    documented = vllm_table_checks(table)
    assert {c.batch for c in paper} == set(EAGLE3_PAPER)
    assert all(any(first <= c.batch <= last for c in documented) for first, last, _ in VLLM_TABLE)
    failed = [c for c in (*documented, *paper) if not c.passed]
    assert not failed, failed


def test_long_context_moves_the_crossover_past_256_only_on_the_longctx_truth(
    table: SpeedupTable,
) -> None:
    assert all(table.crossover(k) is not None for k in (2, 3, 4, 5))
    longctx = validate_truth(
        load_truth("llama3.1-8b-h100-longctx"),
        batches=(1,),
        contexts=(8192,),
        context_batches=(256,),
        ks=(1, 3, 5),
        requests_per_slot=1,
        min_requests=8,
        context_min_requests=8,
    )
    assert all(longctx.by_context[8192].crossover(k) is None for k in (1, 3, 5))


def test_the_report_is_written(table: SpeedupTable, tmp_path: Path) -> None:
    validation = TruthValidation(load_truth(DEFAULT_TRUTH), table, {})
    markdown, png = write_report([validation], tmp_path)
    text = markdown.read_text()
    assert "| 256 |" in text and "truth: llama3.1-8b-h100-eagle3" in text
    assert "EAGLE-3 paper" in render_markdown(validation) and "pass" in text
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_all_stands_for_every_shipped_truth() -> None:
    names = [t.name for t in load_truths(["all", "additive-8b-h100"])]
    assert len(names) == len(set(names)) >= 5
