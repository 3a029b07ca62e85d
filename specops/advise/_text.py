"""The advice as a reader wants it on a terminal: what was measured, then what to run."""

from __future__ import annotations

from specops.advise._advice import Advice, AdviceCrossover, AdviceRecommendation

__all__ = ["advice_text"]


def _batch(value: int | None) -> str:
    return "never" if value is None else str(value)


def _crossover(c: AdviceCrossover) -> str:
    band = f" ({_batch(c.low)}-{_batch(c.high)})" if c.low is not None or c.high else ""
    return f"k={c.k}: {_batch(c.batch)}{band}, prior {_batch(c.prior)}"


def _in_force(advice: Advice) -> str:
    f = advice.in_force
    if not f.speculating:
        return "speculation off (no per-position acceptance counters)"
    table = f", per-batch-size table {f.per_batch_size}" if f.per_batch_size else ""
    ran = (
        f"; {f.drafted_tokens_per_draft:.2f} tokens drafted per draft on average"
        if f.drafted_tokens_per_draft is not None
        else ""
    )
    return f"{f.method}, num_speculative_tokens={f.num_speculative_tokens}{table}{ran}"


def _config(k: int, table: list[list[int]] | None) -> str:
    if k == 0:
        return "speculation off"
    return f"k={k}" + (f" with the table {table}" if table else "")


def _recommendation(r: AdviceRecommendation, reason: str) -> list[str]:
    run = (
        f"--speculative-config '{r.speculative_config}'"
        if r.speculative_config is not None
        else "no --speculative-config (speculation off)"
    )
    choice = _config(r.choice_num_speculative_tokens, r.choice_per_batch_size)
    likely = (
        f", {r.likely_gain:+.1%} or more with {r.confidence:.0%} confidence"
        if r.likely_gain is not None
        else ""
    )
    head = f"Recommended: {run}" if r.change else f"Recommended: keep what runs, {run}"
    same = (r.choice_num_speculative_tokens, r.choice_per_batch_size) == (
        r.num_speculative_tokens,
        r.per_batch_size,
    )
    lines = [head]
    if not same or r.change:
        lines.append(
            f"  the policy's choice, {choice}: {r.predicted_gain:+.1%} over the config in force "
            f"at the mean{likely} (predicted from the measured acceptance and step time)"
        )
    lines.append(f"  {r.verdict}: {reason}")
    return lines


def advice_text(advice: Advice) -> str:
    """Several lines, each a figure with where it comes from."""
    lines = [
        f"Read {advice.target} over the last {advice.window_seconds:g} s"
        + (f" (engines: {advice.engines})" if advice.engines else "")
        + f": {advice.message}",
        f"In force (from the engines' counters): {_in_force(advice)}",
    ]
    running = advice.running_requests
    if running is not None:
        lines.append(
            f"Running requests per engine: mean {running['mean']:.1f}, p50 {running['p50']:g}, "
            f"p90 {running['p90']:g}, p99 {running['p99']:g}, max {running['max']:g} "
            f"({running['samples']:g} samples)"
        )
    if advice.measured:
        lines.append(
            f"Context: {advice.context_tokens:.0f} tokens a running request, "
            f"{advice.context_source}"
        )
    if advice.acceptance_per_position:
        rates = " ".join(f"{a:.3f}" for a in advice.acceptance_per_position)
        lines.append(
            f"Acceptance per position: {rates} ({advice.drafts:.0f} drafts; "
            f"{advice.acceptance_source})"
        )
    else:
        lines.append(f"Acceptance: {advice.acceptance_source}")
    step = f"{advice.step_seconds * 1000:.2f} ms mean; " if advice.step_seconds else ""
    lines.append(f"Step time: {step}{advice.step_time_source}")
    if advice.tpot_seconds is not None:
        lines.append(f"TPOT: {advice.tpot_seconds * 1000:.1f} ms mean")
    if advice.crossovers:
        lines.append(
            "Crossover batch per k (under that step time; 10th-90th percentile under its "
            "posterior; the profile alone): " + "; ".join(_crossover(c) for c in advice.crossovers)
        )
    if advice.recommendation is not None:
        lines += _recommendation(advice.recommendation, advice.reason)
    else:
        lines.append(f"No recommendation: {advice.reason}")
    return "\n".join(lines) + "\n"
