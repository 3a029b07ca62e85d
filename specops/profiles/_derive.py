"""A step-time prior for any model on any GPU, from the model's shape and the GPU's datasheet.

The calibrated profiles (``_catalog``) know three models on two GPUs. For the others the
prior is derived term by term the way the 70B profile was, with every efficiency taken
from the one measured fit, Llama-3.1-8B on an H100 (SpecDecode-Bench), and applied to the
GPU's datasheet figures (``data/gpus.toml``) and the model's shape (``data/models.toml``):

* fixed cost: the weights a step reads, over the GPU's bandwidth at the fit's efficiency
  (0.81), plus two all-reduces a layer under tensor parallelism at 12 us each. A mixture of
  experts reads its dense part and the experts a 32-token step touches, the share
  1 - (1 - top_k / experts)^32: a batch-1 step reads fewer, a large batch all of them;
* per batched token: 2 x active parameters of FLOPs at the fit's share (0.77) of the
  dense rate (FP8 weights at the FP8 rate), plus each token's activation through those
  all-reduces, 2 (t - 1) / t of it per GPU at 250 of NVLink 4's 900 GB/s (the same share
  of other links);
* per context token: its KV bytes at the GPU's bandwidth (the fit's 8B term is exactly
  that);
* host overhead: the fit's 1.207 ms, the scheduler's and not the model's;
* the draft: a built-in one (MTP) as its parameters say; otherwise an EAGLE head (one
  decoder layer, its fc, an lm_head over the vocabulary). Its fixed cost is the fit's
  launch cost (scaled by bandwidth, as the H200 profile does) plus the head's weights read;
  per drafted token the fit's seconds per head parameter, scaled by the dense rate; its KV
  at the fit's draft-KV efficiency (0.51);
* KV capacity as the catalog computes it.

The three calibrated profiles are the checked cases: the derivation reproduces each of
their cost terms within 3 % (``tests/profiles``). Everything else is a prior, with the
uncertainty the learned model gives it; the measured step time corrects it online.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, fields
from importlib import resources

from specops.errors import EngineConfigError, SpecValidationError
from specops.policy import DraftCost, StepCostModel
from specops.profiles._catalog import (
    H100_8B,
    WEIGHT_BYTES_8B,
    draft_kv_tokens,
    kv_tokens,
    make_profile,
)
from specops.profiles._profile import PerformanceProfile

__all__ = [
    "Accelerator",
    "ModelShape",
    "accelerators",
    "derive_profile",
    "gpu_names",
    "model_shapes",
]


@dataclass(frozen=True)
class Accelerator:
    """One GPU's datasheet figures: bytes, bytes per second, dense FLOP/s."""

    name: str
    source: str
    memory_bytes: float
    memory_bandwidth: float
    bf16_flops: float
    fp8_flops: float
    interconnect: float


@dataclass(frozen=True)
class ModelShape:
    """What a model's config.json and card say about its size (see ``data/models.toml``)."""

    name: str
    source: str
    parameters: float
    active_parameters: float
    weight_bytes: float
    layers: int
    hidden_size: int
    intermediate_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    fp8: bool = False
    kv_bytes_per_token: float = 0.0
    experts: int = 0
    experts_per_token: int = 0
    expert_parameters: float = 0.0
    draft_parameters: float = 0.0
    draft_active_parameters: float = 0.0

    @property
    def kv_bytes(self) -> float:
        """KV bytes of one context token over the layers whose cache grows with it."""
        if self.kv_bytes_per_token:
            return self.kv_bytes_per_token
        return float(self.layers * self.kv_heads * self.head_dim * 2 * 2)

    @property
    def bytes_per_parameter(self) -> float:
        return self.weight_bytes / self.parameters

    def eagle_layer_parameters(self) -> float:
        """An EAGLE head's decoder layer and fc: what it reads on top of the target's."""
        h = self.hidden_size
        attention = 2 * h * self.attention_heads * self.head_dim
        attention += 2 * h * self.kv_heads * self.head_dim
        return attention + 3 * h * self.intermediate_size + 2 * h * h

    @property
    def draft_total(self) -> float:
        """The draft's parameters per drafted token (its layer(s) and the lm_head)."""
        if self.draft_active_parameters:
            return self.draft_active_parameters
        return self.eagle_layer_parameters() + self.vocab_size * self.hidden_size

    @property
    def draft_weight_bytes(self) -> float:
        """The draft's own weights in memory (the lm_head is the target's)."""
        if self.draft_parameters:
            return self.draft_parameters * self.bytes_per_parameter
        return self.eagle_layer_parameters() * 2.0

    @property
    def draft_read_bytes(self) -> float:
        """The draft's weights one drafting pass reads, beyond the shared lm_head."""
        if self.draft_active_parameters:
            own = self.draft_active_parameters - self.vocab_size * self.hidden_size
            return max(own, 0.0) * self.bytes_per_parameter
        return self.eagle_layer_parameters() * 2.0

    def read_bytes(self) -> float:
        """Weights one step reads: the dense part and the experts a 32-token step touches."""
        if not self.experts:
            return self.weight_bytes
        expert_bytes = self.expert_parameters * self.bytes_per_parameter
        touched = 1.0 - (1.0 - self.experts_per_token / self.experts) ** _TOUCH_TOKENS
        return self.weight_bytes - expert_bytes + expert_bytes * touched


_TOUCH_TOKENS = 32
# The reference the efficiencies are measured on: the Llama-3.1-8B fit on an H100.
_REF_BANDWIDTH = 3.35e12
_REF_FLOPS = 989e12
_REF_WEIGHT_BYTES = WEIGHT_BYTES_8B
_REF_PARAMETERS = 8.03e9
_REF_KV_BYTES = 32 * 8 * 128 * 2 * 2
_REF_DRAFT_KV_BYTES = 8 * 128 * 2 * 2
# Tensor parallelism, as the 70B profile derives it: two all-reduces a layer.
_ALL_REDUCE_LATENCY_S = 12e-6
_ALL_REDUCE_SHARE = 250e9 / 900e9

BANDWIDTH_EFFICIENCY = _REF_WEIGHT_BYTES / (H100_8B.t_fixed * _REF_BANDWIDTH)
COMPUTE_EFFICIENCY = 2 * _REF_PARAMETERS / (H100_8B.c_tok * _REF_FLOPS)
KV_EFFICIENCY = _REF_KV_BYTES / (H100_8B.c_kv * _REF_BANDWIDTH)
DRAFT_KV_EFFICIENCY = _REF_DRAFT_KV_BYTES / (H100_8B.draft.c_kv * _REF_BANDWIDTH)


@functools.cache
def _reference_shape() -> ModelShape:
    return model_shapes()["meta-llama/Llama-3.1-8B-Instruct"]


@functools.cache
def _draft_constants() -> tuple[float, float]:
    """The fit's draft launch cost at the reference bandwidth, and its seconds per head
    parameter per drafted token at the reference dense rate."""
    head = _reference_shape()
    read = head.draft_read_bytes / (BANDWIDTH_EFFICIENCY * _REF_BANDWIDTH)
    return H100_8B.draft.t_fixed - read, H100_8B.draft.c_tok / head.draft_total


def _load(name: str) -> dict[str, dict[str, object]]:
    text = resources.files("specops.profiles").joinpath("data", name).read_text("utf-8")
    return tomllib.loads(text)


@functools.cache
def accelerators() -> dict[str, Accelerator]:
    return {name: Accelerator(name=name, **values) for name, values in _load("gpus.toml").items()}  # type: ignore[arg-type]


@functools.cache
def model_shapes() -> dict[str, ModelShape]:
    known = {f.name for f in fields(ModelShape)}
    shapes = {}
    for name, values in _load("models.toml").items():
        unknown = set(values) - known
        if unknown:
            raise EngineConfigError(f"models.toml: {name} has unknown keys {sorted(unknown)}")
        shapes[name] = ModelShape(name=name, **values)  # type: ignore[arg-type]
    return shapes


def gpu_names() -> tuple[str, ...]:
    return tuple(sorted(accelerators()))


def _tensor_parallel(
    model: ModelShape, gpu: Accelerator, tp: int, layers: int
) -> tuple[float, float]:
    """All-reduce seconds per step and per token for ``layers`` layers over ``tp`` GPUs."""
    if tp == 1:
        return 0.0, 0.0
    per_token = 2 * layers * (2 * (tp - 1) / tp) * model.hidden_size * 2
    return 2 * layers * _ALL_REDUCE_LATENCY_S, per_token / (_ALL_REDUCE_SHARE * gpu.interconnect)


def _flops(model: ModelShape, gpu: Accelerator) -> float:
    """The dense rate the model's matmuls run at: FP8 weights at the FP8 rate where there is one."""
    return gpu.fp8_flops if model.fp8 and gpu.fp8_flops else gpu.bf16_flops


def _target(model: ModelShape, gpu: Accelerator, tp: int) -> StepCostModel:
    bandwidth = BANDWIDTH_EFFICIENCY * gpu.memory_bandwidth
    flops = _flops(model, gpu)
    launch, per_parameter = _draft_constants()
    step_latency, token_traffic = _tensor_parallel(model, gpu, tp, model.layers)
    draft_latency, draft_traffic = _tensor_parallel(model, gpu, tp, 1)
    draft_kv = model.kv_bytes / model.layers
    return StepCostModel(
        t_fixed=model.read_bytes() / (tp * bandwidth) + step_latency,
        c_tok=2 * model.active_parameters / (tp * COMPUTE_EFFICIENCY * flops) + token_traffic,
        c_kv=model.kv_bytes / (tp * KV_EFFICIENCY * gpu.memory_bandwidth),
        t_overhead=H100_8B.t_overhead,
        draft=DraftCost(
            t_fixed=launch * _REF_BANDWIDTH / gpu.memory_bandwidth
            + model.draft_read_bytes / (tp * bandwidth)
            + draft_latency,
            c_tok=per_parameter * (_REF_FLOPS / flops) * model.draft_total / tp + draft_traffic,
            c_kv=draft_kv / (tp * DRAFT_KV_EFFICIENCY * gpu.memory_bandwidth),
        ),
    )


def derive_profile(
    model: ModelShape, gpu: Accelerator, tensor_parallel_size: int
) -> PerformanceProfile:
    """The prior of ``model`` served on ``tensor_parallel_size`` ``gpu``s; refused (a spec
    error) when its weights leave no room for a KV cache."""
    tp = tensor_parallel_size
    tokens = kv_tokens(gpu.memory_bytes, tp, model.weight_bytes, model.kv_bytes)
    if tokens <= 0:
        raise SpecValidationError(
            f"{model.name} ({model.weight_bytes / 1e9:.0f} GB of weights) does not fit on "
            f"{tp} x {gpu.name} ({gpu.memory_bytes / 1e9:.0f} GB each): raise "
            "spec.engine.tensorParallelSize"
        )
    return make_profile(
        name=f"{model.name} on {tp}x {gpu.name} (derived)",
        model=model.name,
        accelerator=f"{tp}x {gpu.name}" if tp > 1 else gpu.name,
        gpu=gpu.name,
        tensor_parallel_size=tp,
        target=_target(model, gpu, tp),
        kv_cache_tokens=tokens,
        draft_memory_kv_tokens=draft_kv_tokens(
            tokens, model.draft_weight_bytes, model.kv_bytes, model.layers
        ),
        params=model.active_parameters,
        peak_flops=tp * COMPUTE_EFFICIENCY * _flops(model, gpu),
        description=f"derived from the model's shape ({model.source}) and the GPU's "
        f"datasheet ({gpu.source}) with the H100 fit's efficiencies: a prior only",
        draft_pass_s=model.draft_read_bytes / (tp * BANDWIDTH_EFFICIENCY * gpu.memory_bandwidth),
    )
