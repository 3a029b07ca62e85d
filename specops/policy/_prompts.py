"""The prompts that decoding steps also compute, and how they fall on the steps.

In steady state prompts enter as fast as requests finish, so steps that emit ``e`` tokens
take ``e * per_output_token`` prompt tokens on average. They do not take them evenly: the
engine prefills a prompt whole in one step (up to its token budget), so most steps take no
prompt and a few take one or more whole prompts. Below the compute knee the even spread
costs almost nothing, while the steps that take a prompt run past the knee; priced at the
mean step, the prefill is free exactly where speculation off competes with a short k, and
the step time comes out short by the knee's share of every prompt.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

__all__ = ["Prompts"]

# The Poisson's terms are summed until this little of its mass is left; past ``_EXACT``
# prompts a step, the count is near normal and three points (Gauss-Hermite) price it.
_TAIL = 1e-3
_EXACT = 12.0
_HERMITE = ((-math.sqrt(3.0), 1.0 / 6.0), (0.0, 2.0 / 3.0), (math.sqrt(3.0), 1.0 / 6.0))


@dataclass(frozen=True, slots=True)
class Prompts:
    """Prompt tokens per output token and one prompt's mean length, as measured.

    ``mean_tokens`` is 0 when the length is unknown (an engine that counts no finished
    requests): the prompt tokens are then spread evenly over the steps.
    """

    per_output_token: float = 0.0
    mean_tokens: float = 0.0

    def __post_init__(self) -> None:
        if self.per_output_token < 0 or self.mean_tokens < 0:
            raise ValueError(f"prompt figures must be >= 0, got {self}")

    def per_step(self, emitted: float) -> tuple[tuple[int, float], ...]:
        """(prompt tokens, share of steps) over steps that emit ``emitted`` tokens each.

        How many prompts a step takes is Poisson, its rate the prompts that enter while
        the step's tokens are emitted; the shares sum to 1.
        """
        return _per_step(self.per_output_token, self.mean_tokens, emitted)


# Every posterior draw of a decision prices the same steps with the same prompts: the
# spread of prompts over them is worked out once. A decision prices at most 256 batch sizes
# x 8 k x with and without a table; the cache holds that many, not a long-lived operator's
# every window's.
@functools.lru_cache(maxsize=4096)
def _per_step(
    per_output_token: float, mean_tokens: float, emitted: float
) -> tuple[tuple[int, float], ...]:
    tokens = emitted * per_output_token
    if tokens <= 0:
        return ((0, 1.0),)
    if mean_tokens <= 0:
        return ((round(tokens), 1.0),)
    rate = tokens / mean_tokens
    if rate > _EXACT:
        spread = math.sqrt(rate) * mean_tokens
        return tuple((round(max(tokens + x * spread, 0.0)), w) for x, w in _HERMITE)
    terms: list[tuple[int, float]] = []
    mass, count, chance = 0.0, 0, math.exp(-rate)
    while mass < 1.0 - _TAIL:
        terms.append((round(count * mean_tokens), chance))
        mass += chance
        count += 1
        chance *= rate / count
    return tuple((t, share / mass) for t, share in terms)
