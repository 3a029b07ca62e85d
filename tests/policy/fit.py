"""The published SpecDecode-Bench fit of Llama-3.1-8B on one H100 as a roofline cost model."""

from specops.policy import DraftCost, StepCostModel

H100_FIT = StepCostModel(
    t_fixed=5.886e-3,
    c_tok=0.0,
    c_kv=3.926e-8,
    t_overhead=1.207e-3,
    draft=DraftCost(t_fixed=2.135e-3, c_tok=8.414e-7, c_kv=2.378e-9),
    flops_per_token=1.6e10,
    peak_flops=7.6e14,
)
