"""A speculative configuration as vLLM reads it: a cap k and an optional per-batch-size table.

vLLM (V1) looks k up per step by the number of scheduled requests in
``num_speculative_tokens_per_batch_size``: inclusive ranges ``[start, end, k]`` whose
first range starts at 1; a gap or the tail past the last range carries the previous
range's k forward, and every entry is capped by ``num_speculative_tokens``. Which
methods honour the table is vLLM's to say (``specops.vllm.table_applies``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ScheduleRange",
    "SpecConfig",
]


@dataclass(frozen=True)
class ScheduleRange:
    """Batch sizes ``start``..``end`` (inclusive) draft ``k`` tokens per step."""

    start: int
    end: int
    k: int

    def __post_init__(self) -> None:
        if self.start < 1 or self.end < self.start:
            raise ValueError(
                f"schedule range [{self.start}, {self.end}] must satisfy 1 <= start <= end"
            )
        if self.k < 0:
            raise ValueError(f"schedule range [{self.start}, {self.end}] has k={self.k} < 0")

    def as_list(self) -> list[int]:
        return [self.start, self.end, self.k]


@dataclass(frozen=True)
class SpecConfig:
    """``num_speculative_tokens`` (0: no speculation, no draft model) and the optional table."""

    num_speculative_tokens: int
    per_batch_size: tuple[ScheduleRange, ...] = ()

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 0:
            raise ValueError(
                f"num_speculative_tokens must be >= 0, got {self.num_speculative_tokens}"
            )
        if not self.per_batch_size:
            return
        if self.num_speculative_tokens == 0:
            raise ValueError("a per-batch-size table needs num_speculative_tokens > 0")
        if self.per_batch_size[0].start != 1:
            raise ValueError("the first per-batch-size range must start at batch 1")
        for before, after in zip(self.per_batch_size, self.per_batch_size[1:], strict=False):
            if after.start <= before.end:
                raise ValueError(
                    f"per-batch-size ranges must be sorted and disjoint: "
                    f"[{before.start}, {before.end}] then [{after.start}, {after.end}]"
                )

    @classmethod
    def off(cls) -> SpecConfig:
        return cls(0)

    @classmethod
    def static(cls, k: int) -> SpecConfig:
        return cls(k)

    @classmethod
    def table(cls, rows: Sequence[Sequence[int]], cap: int | None = None) -> SpecConfig:
        """From ``[[start, end, k], ...]``; the cap defaults to the largest k in the table."""
        ranges = tuple(ScheduleRange(int(r[0]), int(r[1]), int(r[2])) for r in rows)
        return cls(max(r.k for r in ranges) if cap is None else cap, ranges)

    @property
    def is_off(self) -> bool:
        return self.num_speculative_tokens == 0

    def k_for_batch(self, batch: int) -> int:
        """The k vLLM drafts with when ``batch`` requests are scheduled in a step."""
        if not self.per_batch_size:
            return self.num_speculative_tokens
        k = self.per_batch_size[0].k
        for entry in self.per_batch_size:
            if entry.start > batch:
                break
            k = entry.k
        return min(k, self.num_speculative_tokens)

    def as_vllm(self) -> dict[str, object]:
        """The speculative-config keys this config sets (method and model come from elsewhere)."""
        out: dict[str, object] = {"num_speculative_tokens": self.num_speculative_tokens}
        if self.per_batch_size:
            out["num_speculative_tokens_per_batch_size"] = [
                r.as_list() for r in self.per_batch_size
            ]
        return out

    def describe(self) -> str:
        if self.is_off:
            return "off"
        if not self.per_batch_size:
            return f"k={self.num_speculative_tokens}"
        rows = ", ".join(f"{r.start}-{r.end}:{r.k}" for r in self.per_batch_size)
        return f"k<={self.num_speculative_tokens} by batch [{rows}]"
