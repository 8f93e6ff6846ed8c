"""mixboard-flash-attn's backend, declared once (mixboard.Declaration); the class in backend.py holds its
code. Imports neither torch nor flash_attn. The limits are flash-attn 2.8's (csrc/flash_attn/flash_api.cpp)."""

from mixboard import Declaration

from .paging import PAGE_MULTIPLE

# The architectures flash-attn's ROCm build (Composable Kernel) compiles for: its README's GPU_ARCHS
# (MI200, MI300, MI350, RDNA 3 and 4). Its paged kernel wants blocks of a multiple of 128, which PAGE_MULTIPLE is.
ROCM_ARCHS = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1102", "gfx1150", "gfx1151", "gfx1200", "gfx1201")
MAX_HEAD_SIZE = 256
HEAD_SIZE_MULTIPLE = 8

INSTALL_HINT = ("pip install 'mixboard-flash-attn[flash]' on a CUDA or ROCm machine; flash-attn compiles its "
                "kernels there (nvcc, or hipcc for its ROCm build), see its README")

PLUGIN = Declaration(kind="attention", api_version=1)

FLASH_ATTN = PLUGIN(
    name="flash_attn",
    priority=100,
    devices=("cuda",),
    dtypes=("bfloat16", "float16"),
    requires=("flash_attn",),
    install_hint=INSTALL_HINT,
    capture="never",  # unverified without a GPU; max_seqlen_q and max_seqlen_k are per-step ints
    description=(f"flash-attn 2 varlen kernel over the paged cache (block_table); NVIDIA compute capability >= 8.0 "
                 f"or AMD {', '.join(ROCM_ARCHS[:3])} and RDNA 3/4 (ROCm, no softcap), "
                 f"head sizes up to {MAX_HEAD_SIZE} in multiples of {HEAD_SIZE_MULTIPLE}, "
                 f"cache blocks of a multiple of {PAGE_MULTIPLE} tokens"),
)
