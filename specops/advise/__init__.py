"""``specops advise``: what the controller would run on a vLLM deployment specops did not
create, from the engines' own counters in Prometheus; nothing is changed."""

from specops.advise._advice import (
    Advice,
    AdviceCrossover,
    AdviceInForce,
    AdviceInput,
    AdviceRecommendation,
    advise,
    speculation_given,
)
from specops.advise._text import advice_text

__all__ = [
    "Advice",
    "AdviceCrossover",
    "AdviceInForce",
    "AdviceInput",
    "AdviceRecommendation",
    "advice_text",
    "advise",
    "speculation_given",
]
