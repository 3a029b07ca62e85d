"""Which profile a service predicts with: a named one, the catalog's, or one derived."""

from __future__ import annotations

from specops.profiles._catalog import PROFILES, get_profile
from specops.profiles._derive import accelerators, derive_profile, model_shapes
from specops.profiles._profile import PerformanceProfile

__all__ = ["find_profile"]


def find_profile(
    name: str | None, *, model: str, tensor_parallel_size: int, gpu: str | None = None
) -> PerformanceProfile | None:
    """The named profile, else the catalog's for this model, parallelism (and GPU, when
    given), else one derived from the model's shape and the GPU's datasheet.

    None means specops has no cost model for the deployment (a model whose shape it does
    not know, or no GPU named): callers then make no predictions rather than borrow
    another model's numbers.
    """
    if name is not None:
        return get_profile(name)
    for profile in PROFILES.values():
        if (profile.model, profile.tensor_parallel_size) == (model, tensor_parallel_size) and (
            gpu is None or profile.gpu == gpu
        ):
            return profile
    shape = model_shapes().get(model)
    accelerator = accelerators().get(gpu) if gpu is not None else None
    if shape is None or accelerator is None:
        return None
    return derive_profile(shape, accelerator, tensor_parallel_size)
