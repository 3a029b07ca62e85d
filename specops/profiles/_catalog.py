"""The named profiles, and how each number was obtained.

``llama3.1-8b-h100`` is the SpecDecode-Bench fit from
``lab/specops_lab/sim/traces/README.md``, term for term. Its EAGLE draft term ``8.414e-7 * k``
is read as seconds per drafted token in the batch, i.e. ``8.414e-7 * B * k``
(DraftCost.c_tok is charged per B * k): drafting cost
that did not grow with the batch would make speculation free at any load.

``llama3.1-8b-h200`` scales the bandwidth-bound terms (target t_fixed and c_kv, draft
t_fixed and c_kv) by 3.35 / 4.8 TB/s, as the README says; the per-token compute slope
and the host overhead stay, the H200 having the H100's compute.

``llama3.1-70b-h100-tp4`` is derived from first principles, calibrated against the 8B fit
(the same kernels, on the same chip):

* Effective HBM bandwidth for weight reads, from the 8B fit: 16.06 GB of bf16 weights in
  t_fixed = 5.886 ms is 2.73 TB/s (81 % of 3.35 TB/s). Each of 4 GPUs reads a quarter of
  70.55e9 * 2 B = 35.3 GB: 12.9 ms. Tensor parallelism adds two all-reduces per layer,
  160 per step, at about 12 us of NVLink latency each: 1.9 ms. t_fixed = 14.85 ms.
* Per batched token: the 8B slope 2.101e-5 s is 2 * 8.0e9 FLOP at 7.6e14 FLOP/s; a 70B
  shard does 2 * 70.55e9 / 4 FLOP per token: 4.64e-5 s. Each token's 8192-wide bf16
  activation (16 KiB) goes through 160 ring all-reduces over 4 GPUs (1.5x the message
  per GPU) at about 250 GB/s bus bandwidth: 1.57e-5 s. c_tok = 6.21e-5 s.
* Per context token read: Llama-3.1-70B's KV is 80 layers * 8 heads * 128 * 2 (K, V)
  * 2 B = 320 KiB per token, 80 KiB per GPU, read at 3.35 TB/s (the 8B c_kv is exactly
  128 KiB at 3.35 TB/s): c_kv = 2.45e-8 s.
* Host overhead is the scheduler's, not the model's: the 8B's 1.207 ms.
* EAGLE draft (one 8192-wide decoder layer and its fc, about 1.0e9 parameters, sharing
  the target's embedding and lm_head): its weight read per GPU (0.5 GB, 0.18 ms) is the
  same as the 8B head's, so the fixed draft time is the 8B's plus the layer's two
  all-reduces: 2.16 ms. Per drafted token the 8B head's 0.78e9 parameters (layer plus
  lm_head) become 2.05e9 / 4 = 0.51e9 per GPU, scaling 8.414e-7 s to 5.55e-7 s, plus two
  all-reduces of 16 KiB (1.97e-7 s): 7.5e-7 s. Its one-layer KV is 1 KiB per token per
  GPU, a quarter of the 8B head's: draft c_kv = 5.95e-10 s.
* n-gram drafting costs the same 0.59 % of the target forward as on the 8B.

One pass of the EAGLE head (``draft_pass_s``) reads its weights at the bandwidth the
target's fixed term implies: the 8B head's 0.5 GB at 2.73 TB/s is 0.18 ms on the H100
(scaled by 3.35 / 4.8 on the H200); the 70B head's 2 GB over 4 GPUs reads the same 0.5 GB
per GPU. The fits price drafting as one cost per step; the head runs one pass per drafted
position, which only the step-time prior prices (see ``specops.policy.cost_prior``).

KV capacity, all profiles: HBM * 0.9 (vLLM's default gpu_memory_utilization), less the
weights, less about 4 GB per GPU for activations and CUDA graphs, divided by the KV
bytes per token. A draft network takes its own weights plus its own KV (one layer for
every target's L layers, so 1 / (L + 1) of the pool) from that capacity.
"""

from __future__ import annotations

from specops.errors import EngineConfigError
from specops.policy import DraftCost, StepCostModel
from specops.profiles._profile import PerformanceProfile

__all__ = [
    "ACTIVATION_RESERVE_BYTES",
    "GPU_MEMORY_UTILIZATION",
    "H100_8B",
    "NGRAM_FRACTION",
    "PROFILES",
    "WEIGHT_BYTES_8B",
    "draft_kv_tokens",
    "get_profile",
    "kv_tokens",
    "make_profile",
    "profile_names",
]

GPU_MEMORY_UTILIZATION = 0.9
ACTIVATION_RESERVE_BYTES = 4.0e9
NGRAM_FRACTION = 0.0059
_H100_TO_H200 = 3.35 / 4.8


def kv_tokens(hbm_bytes: float, gpus: int, weight_bytes: float, kv_bytes_per_token: float) -> int:
    free = gpus * (hbm_bytes * GPU_MEMORY_UTILIZATION - ACTIVATION_RESERVE_BYTES)
    return int((free - weight_bytes) / kv_bytes_per_token)


def draft_kv_tokens(
    kv_tokens: int, draft_weight_bytes: float, kv_bytes_per_token: float, layers: int
) -> int:
    return int(draft_weight_bytes / kv_bytes_per_token + kv_tokens / (layers + 1))


def make_profile(
    *,
    name: str,
    model: str,
    accelerator: str,
    gpu: str,
    tensor_parallel_size: int,
    target: StepCostModel,
    kv_cache_tokens: int,
    draft_memory_kv_tokens: int,
    params: float,
    peak_flops: float,
    description: str,
    draft_pass_s: float,
) -> PerformanceProfile:
    lookup = StepCostModel(
        t_fixed=target.t_fixed,
        c_tok=target.c_tok,
        c_kv=target.c_kv,
        t_overhead=target.t_overhead,
        draft=DraftCost(fraction_of_target=NGRAM_FRACTION),
    )
    return PerformanceProfile(
        name=name,
        model=model,
        accelerator=accelerator,
        tensor_parallel_size=tensor_parallel_size,
        network=target,
        lookup=lookup,
        kv_cache_tokens=kv_cache_tokens,
        draft_memory_kv_tokens=draft_memory_kv_tokens,
        params=params,
        peak_flops=peak_flops,
        description=description,
        gpu=gpu,
        draft_pass_s=draft_pass_s,
    )


_KV_8B = 32 * 8 * 128 * 2 * 2
_KV_70B = 80 * 8 * 128 * 2 * 2
_EAGLE_8B_WEIGHTS = 0.25e9 * 2
_EAGLE_70B_WEIGHTS = 1.0e9 * 2

H100_8B = StepCostModel(
    t_fixed=5.886e-3,
    c_tok=2.101e-5,
    c_kv=3.926e-8,
    t_overhead=1.207e-3,
    draft=DraftCost(t_fixed=2.135e-3, c_tok=8.414e-7, c_kv=2.378e-9),
)

# Llama-3.1-8B's bf16 weights, and the H100's effective bandwidth reading them in t_fixed.
WEIGHT_BYTES_8B = 16.06e9
_H100_WEIGHT_READ = WEIGHT_BYTES_8B / H100_8B.t_fixed

_H200_8B = StepCostModel(
    t_fixed=H100_8B.t_fixed * _H100_TO_H200,
    c_tok=H100_8B.c_tok,
    c_kv=H100_8B.c_kv * _H100_TO_H200,
    t_overhead=H100_8B.t_overhead,
    draft=DraftCost(
        t_fixed=H100_8B.draft.t_fixed * _H100_TO_H200,
        c_tok=H100_8B.draft.c_tok,
        c_kv=H100_8B.draft.c_kv * _H100_TO_H200,
    ),
)

_H100_70B_TP4 = StepCostModel(
    t_fixed=14.85e-3,
    c_tok=6.21e-5,
    c_kv=2.45e-8,
    t_overhead=1.207e-3,
    draft=DraftCost(t_fixed=2.16e-3, c_tok=7.5e-7, c_kv=5.95e-10),
)

_kv_8b_h100 = kv_tokens(80e9, 1, WEIGHT_BYTES_8B, _KV_8B)
_kv_8b_h200 = kv_tokens(141e9, 1, WEIGHT_BYTES_8B, _KV_8B)
_kv_70b_h100 = kv_tokens(80e9, 4, 141.1e9, _KV_70B)

PROFILES: dict[str, PerformanceProfile] = {
    profile.name: profile
    for profile in (
        make_profile(
            name="llama3.1-8b-h100",
            model="meta-llama/Llama-3.1-8B-Instruct",
            accelerator="H100-SXM-80GB",
            gpu="H100-SXM5-80GB",
            tensor_parallel_size=1,
            target=H100_8B,
            kv_cache_tokens=_kv_8b_h100,
            draft_memory_kv_tokens=draft_kv_tokens(_kv_8b_h100, _EAGLE_8B_WEIGHTS, _KV_8B, 32),
            params=8.0e9,
            peak_flops=7.6e14,
            description="SpecDecode-Bench step-time fit, vLLM on one H100",
            draft_pass_s=_EAGLE_8B_WEIGHTS / _H100_WEIGHT_READ,
        ),
        make_profile(
            name="llama3.1-8b-h200",
            model="meta-llama/Llama-3.1-8B-Instruct",
            accelerator="H200-SXM-141GB",
            gpu="H200-SXM-141GB",
            tensor_parallel_size=1,
            target=_H200_8B,
            kv_cache_tokens=_kv_8b_h200,
            draft_memory_kv_tokens=draft_kv_tokens(_kv_8b_h200, _EAGLE_8B_WEIGHTS, _KV_8B, 32),
            params=8.0e9,
            peak_flops=7.6e14,
            description="the H100 fit with bandwidth-bound terms scaled by 3.35/4.8",
            draft_pass_s=_EAGLE_8B_WEIGHTS / _H100_WEIGHT_READ * _H100_TO_H200,
        ),
        make_profile(
            name="llama3.1-70b-h100-tp4",
            model="meta-llama/Llama-3.1-70B-Instruct",
            accelerator="4x H100-SXM-80GB, NVLink",
            gpu="H100-SXM5-80GB",
            tensor_parallel_size=4,
            target=_H100_70B_TP4,
            kv_cache_tokens=_kv_70b_h100,
            draft_memory_kv_tokens=draft_kv_tokens(_kv_70b_h100, _EAGLE_70B_WEIGHTS, _KV_70B, 80),
            params=70.55e9,
            peak_flops=4 * 7.6e14,
            description="derived from first principles against the 8B fit (see module doc)",
            draft_pass_s=_EAGLE_70B_WEIGHTS / 4 / _H100_WEIGHT_READ,
        ),
    )
}


def profile_names() -> tuple[str, ...]:
    return tuple(sorted(PROFILES))


def get_profile(name: str) -> PerformanceProfile:
    """The profile called ``name``; an unknown name is refused with the list of known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise EngineConfigError(
            f"unknown performance profile {name!r}; known profiles: {', '.join(profile_names())}"
        ) from None
