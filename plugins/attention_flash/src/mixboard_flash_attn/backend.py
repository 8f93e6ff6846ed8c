"""``flash_attn``: FlashAttention-2's varlen kernel over the paged K/V cache.

This module is what listing and selection read; it imports neither torch
nor flash_attn. The limits are flash-attn 2.8's (csrc/flash_attn/flash_api.cpp); those the
declaration states are in declarations.py.
"""

from __future__ import annotations

from importlib import metadata

from mixboard import Backend, StateSpec

from .declarations import FLASH_ATTN, HEAD_SIZE_MULTIPLE, INSTALL_HINT, MAX_HEAD_SIZE, ROCM_ARCHS
from .paging import PAGE_MULTIPLE

MIN_CAPABILITY = (8, 0)  # "FlashAttention only supports Ampere GPUs or newer"
MIN_VERSION = (2, 6)  # softcap in the varlen kernel (block_table came in 2.5)


class FlashAttention(Backend):
    declaration = FLASH_ATTN

    @classmethod
    def state_spec(cls, spec):
        """The canonical K/V layout, in blocks flash-attn's paged kernel accepts."""
        token = (spec.num_kv_heads, spec.head_size)
        return StateSpec.paged(block_multiple=PAGE_MULTIPLE, k_cache=(token, spec.dtype), v_cache=(token, spec.dtype))

    @classmethod
    def check(cls, spec, env):
        reasons = []
        if env.device == "cuda":  # elsewhere the device reason already says it all
            reasons.extend(_gpu_reasons(spec, env))
        if spec.head_size > MAX_HEAD_SIZE or spec.head_size % HEAD_SIZE_MULTIPLE:
            # flash-attn would pad head_size to a multiple of 8 by copying the whole paged cache on every call
            reasons.append(f"head_size {spec.head_size} is not supported: flash-attn takes head sizes up to "
                           f"{MAX_HEAD_SIZE} that are multiples of {HEAD_SIZE_MULTIPLE}")
        installed = _installed_version()
        if installed is not None and installed < MIN_VERSION:
            reasons.append(f"flash-attn {'.'.join(map(str, installed))} is installed; this backend needs "
                           f"{'.'.join(map(str, MIN_VERSION))} or newer ({INSTALL_HINT})")
        return reasons

    @classmethod
    def builder(cls, spec, env):
        from .meta import build_meta  # imports torch: only when a model is built

        return build_meta

    @classmethod
    def make_impl(cls, spec, env):
        try:
            from flash_attn import flash_attn_varlen_func
        except ImportError as exc:
            raise ImportError(f"the flash_attn backend needs flash-attn: {INSTALL_HINT} ({exc})") from exc
        from .impl import FlashAttentionImpl

        return FlashAttentionImpl(spec, flash_attn_varlen_func)


def _gpu_reasons(spec, env) -> list[str]:
    if env.is_rocm:
        reasons = []
        if env.arch not in ROCM_ARCHS:
            reasons.append(f"flash-attn's ROCm build supports {', '.join(ROCM_ARCHS)} (MI200, MI300, MI350, RDNA 3/4); "
                           f"this GPU is {env.arch or 'unknown'}")
        if spec.logits_soft_cap:
            # its varlen kernel takes softcap and ignores it: the scores would silently go uncapped
            reasons.append("flash-attn's ROCm build ignores logits_soft_cap, so this layer's scores would go uncapped "
                           "(sdpa caps them)")
        return reasons
    if env.capability is None:
        return ["needs an NVIDIA GPU of compute capability 8.0 or newer (Ampere, Ada, Hopper) or a supported AMD "
                "one, and this environment's GPU is unknown; pass --arch (sm_90, gfx942) or --capability"]
    if not env.capability_at_least(*MIN_CAPABILITY):
        return [f"needs compute capability 8.0 or newer (Ampere, Ada, Hopper); this GPU has {env.capability_text}"]
    return []


def _installed_version() -> tuple[int, ...] | None:
    """flash-attn's version from its distribution metadata (no import), or None if unknown."""
    try:
        text = metadata.version("flash-attn")
    except metadata.PackageNotFoundError:
        return None
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            return None
        parts.append(int(digits))
    return tuple(parts)
