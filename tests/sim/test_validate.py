from pathlib import Path

import pytest

from specops.sim._validate import SpeedupTable, measure_speedups, render_markdown, write_report


@pytest.fixture(scope="module")
def table() -> SpeedupTable:
    return measure_speedups(batches=(1, 32, 256), requests_per_slot=2, min_requests=16)


def test_speculation_pays_at_small_batch(table: SpeedupTable) -> None:
    assert table.speedup[1][3] > 1.3
    assert table.speedup[1][5] > 1.3


def test_speedup_falls_with_batch(table: SpeedupTable) -> None:
    for k in (1, 3, 5):
        assert table.speedup[1][k] > table.speedup[32][k] > table.speedup[256][k]


def test_long_drafts_reach_the_crossover_where_published_data_puts_it(table: SpeedupTable) -> None:
    # vLLM's schedules turn drafting off from batch 129-166 on; k=5 is about break-even at 256.
    assert table.speedup[256][5] < 1.1
    assert table.best_k(1) == 5
    assert table.best_k(256) < 5


def test_the_report_is_written(table: SpeedupTable, tmp_path: Path) -> None:
    markdown, png = write_report(table, tmp_path)
    assert "| 256 |" in markdown.read_text() and "EAGLE-3" in render_markdown(table)
    assert png.read_bytes()[:4] == b"\x89PNG"
