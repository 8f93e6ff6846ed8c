"""vLLM's cache memory as mixboard's state: views, never copies.

Paged (attention): vLLM gives each layer a logical [blocks, head slots, tokens per block, bytes]
view. attention.py asks for one head slot per state tensor of the backend's StateSpec, so slot i
viewed as [blocks, block_size, *tensor shape] is that tensor's pool. In attention-only models
(LHBNC layout) the pools are contiguous. In hybrids vLLM requires a block-compact layout (LBHNC:
v1/attention/backends/utils.py:296), so every pool is strided in dim 0 (block stride = the page,
padded to the mamba page): records are contiguous, stride(0) > record size.

Slots (mamba1, mamba2, short_conv): vLLM allocates exactly the shapes the backend's StateSpec
declares (layers/base.py) and binds them as ``layer.kv_cache``; those pools are strided in dim 0
too (one page per slot holds every tensor).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from mixboard.dtypes import dtype_name

from .errors import StartupError


@lru_cache(maxsize=None)
def strided_pools_accepted() -> bool:
    """Does the installed mixboard's contract take pools strided in dim 0? Asked of mixboard's own
    paged-input check, the one every attention backend runs."""
    from mixboard import AttentionSpec
    from mixboard.ops.checks import BackendInputError
    from mixboard.ops.paged import check_paged_inputs

    spec = AttentionSpec(num_heads=1, num_kv_heads=1, head_size=1, dtype="float32")
    x = torch.zeros(1, 1, 1)
    pages = torch.zeros(2, 2, 1, 1, 1)  # [blocks, k|v, block_size, kv heads, head size]
    try:
        check_paged_inputs("probe", spec, x, x, x, {"k_cache": pages[:, 0], "v_cache": pages[:, 1]}, 1, 1, (0, 1))
    except BackendInputError:
        return False
    return True


def check_hybrid(plan) -> None:
    from mixboard.state import PAGED, SLOTS

    layouts = {g.state_spec.layout for g in plan.groups}
    if {PAGED, SLOTS} <= layouts and not strided_pools_accepted():
        kinds = sorted({lp.kind for lp in plan.layers})
        raise StartupError(
            f"mixboard-vllm: this model is a hybrid ({', '.join(kinds)}): vLLM lays its attention KV cache out "
            "block-strided (LBHNC, pages padded to the state page) and the installed mixboard requires contiguous "
            "attention pools; upgrade mixboard to a version whose contract takes pools strided in dim 0, or set "
            "MIXBOARD_VLLM=0 to let vLLM run this model itself")


def check_paged_layout(plan) -> None:
    """vLLM's page holds one head slot per tensor, all of one size (attention.py customize_spec):
    mixboard's canonical k_cache and v_cache of [kv_heads, head_size] per token, in the layer dtype."""
    from mixboard.state import PAGED

    for group in plan.groups:
        if group.state_spec.layout != PAGED:
            continue
        spec = plan.layer(group.layers[0]).spec
        want = (spec.num_kv_heads, spec.head_size)
        for name, t in group.state_spec.tensors:
            if len(group.state_spec.tensors) != 2 or tuple(t.shape) != want or t.dtype != spec.dtype:
                raise StartupError(
                    f"mixboard-vllm: layer {group.layers[0]}: backend {group.backend} declares paged state "
                    f"{[(n, tuple(x.shape), x.dtype) for n, x in group.state_spec.tensors]}; inside vLLM a page holds "
                    f"k_cache and v_cache of {want} per token in {spec.dtype}; choose another backend "
                    f"(MIXBOARD_BACKEND=attention=NAME)")


def check_slot_state(layer: str, kind: str, backend: str, state_spec, shapes, dtypes, align: bool,
                     settings: str = "") -> None:
    """Can vLLM hold a slot-state layer's state as the planned backend declares it (``state_spec``),
    where vLLM's own layer would keep ``shapes`` in ``dtypes`` (chosen by vLLM's ``settings``)? vLLM
    allocates what the backend declares, but sized hybrid pages at config time from its own shapes
    (platforms/interface.py:1052), so the bytes must be the same. A state of vLLM's tensors in other
    dtypes would ignore the cache dtypes vLLM was given without a word: refused. With prefix caching
    (``align``) vLLM copies states between blocks with one copy function per tensor of its own layer
    (v1/worker/mamba_utils.py, zip(kv_caches, state_copy_funcs)): a tensor more would never be
    copied, so the count must be the same too."""
    ours = [(tuple(t.shape), getattr(torch, t.dtype)) for _, t in state_spec.tensors]
    theirs = sum(_nbytes(s, d) for s, d in zip(shapes, dtypes))
    if len(ours) == len(dtypes) and [d for _, d in ours] != list(dtypes):
        # vLLM's first state tensor (conv) takes mamba_cache_dtype, its second (ssm) mamba_ssm_cache_dtype
        flags = " ".join(f"{flag} {_names([d])}" for flag, (_, d) in
                         zip(("--mamba-cache-dtype", "--mamba-ssm-cache-dtype"), ours))
        raise StartupError(f"mixboard-vllm: layer {layer}: vLLM keeps this layer's state in ({_names(dtypes)})"
                           f"{f' ({settings})' if settings else ''}, backend {backend} in "
                           f"({_names(d for _, d in ours)}): give vLLM the backend's ({flags}), or choose a "
                           f"backend that keeps vLLM's (MIXBOARD_BACKEND={kind}=NAME)")
    fix = f"choose a backend with the kind's canonical state (MIXBOARD_BACKEND={kind}=NAME)"
    if sum(_nbytes(s, d) for s, d in ours) != theirs:
        raise StartupError(f"mixboard-vllm: layer {layer}: backend {backend}'s state {[s for s, _ in ours]} differs "
                           f"in size from what vLLM sized its pages for ({theirs} bytes); {fix}")
    if align and len(ours) != len(shapes):
        raise StartupError(f"mixboard-vllm: layer {layer}: backend {backend} keeps {len(ours)} state tensors where "
                           f"vLLM's layer keeps {len(shapes)}, and with prefix caching vLLM copies states tensor by "
                           f"tensor, its own count; {fix}, or turn prefix caching off")


def _names(dtypes) -> str:
    return ", ".join(map(dtype_name, dtypes))


def _nbytes(shape, dtype) -> int:
    n = torch.empty((), dtype=dtype).element_size()
    for s in shape:
        n *= s
    return n


def paged_pools(kv_cache: torch.Tensor, bound) -> dict[str, torch.Tensor]:
    """One pool per state tensor, each [blocks, block_size, *shape], viewing vLLM's memory."""
    blocks, slots, block_size, _ = kv_cache.shape
    tensors = bound.state_spec.tensors
    if slots != len(tensors):
        raise StartupError(f"mixboard-vllm: layer {bound.name}: vLLM's page has {slots} head slots but backend "
                           f"{bound.backend} declares {len(tensors)} state tensors ({', '.join(n for n, _ in tensors)})")
    pools = {}
    for i, (name, t) in enumerate(tensors):
        # [blocks, block_size, one token's content]: the last two dims are contiguous, dim 0 may be strided
        pools[name] = kv_cache[:, i].view(blocks, block_size, *t.shape)
    return pools


def slot_pools(kv_cache, bound) -> dict[str, torch.Tensor]:
    """vLLM allocated one tensor per state tensor the backend declared (layers/base.py), in order."""
    tensors = bound.state_spec.tensors
    if len(kv_cache) != len(tensors):
        raise StartupError(f"mixboard-vllm: layer {bound.name}: vLLM bound {len(kv_cache)} state tensors but backend "
                           f"{bound.backend} declares {len(tensors)} ({', '.join(n for n, _ in tensors)})")
    return {name: pool for (name, _), pool in zip(tensors, kv_cache)}


class PoolViews:
    """One layer's pools over the cache vLLM bound to it, viewed once: vLLM binds its caches after
    the profile run (and may bind again), so the views are made anew only when the memory changes."""

    __slots__ = ("_view", "_key", "_pools")

    def __init__(self, view):
        self._view, self._key, self._pools = view, None, None  # view: paged_pools or slot_pools

    def __call__(self, kv_cache, bound) -> dict[str, torch.Tensor]:
        if isinstance(kv_cache, (list, tuple)):
            key = tuple((t.data_ptr(), t.shape) for t in kv_cache)
        else:  # attention: one tensor, every layer, every step
            key = (kv_cache.data_ptr(), kv_cache.shape)
        if key != self._key:
            self._key, self._pools = key, self._view(kv_cache, bound)
        return self._pools
