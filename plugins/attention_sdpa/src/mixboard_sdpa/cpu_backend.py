"""``sdpa_cpu``: ``sdpa`` with decodes and causal prefills that read the paged cache in place.

On a CPU in float32 or bfloat16 the attention of a step is the C kernel's
(``_paged_decode.c``, built once per cache dtype): each query row (a decode,
or a prompt's token) reads the keys it sees from their cache blocks instead
of a gathered copy; bidirectional layers' prefills are ``sdpa``'s. This
module is what listing and selection read; it imports neither torch nor the
kernel.
"""

from __future__ import annotations

from functools import lru_cache, partial

from mixboard import Backend, compiled_kernels

from .declarations import KERNELS, MAX_GROUP, MAX_HEAD_SIZE, SDPA_CPU

INSTALL_HINT = "reinstall mixboard-sdpa where a C compiler with OpenMP (gcc) is present, to build it"


@lru_cache(maxsize=None)
def kernel_unusable(dtype: str = "float32") -> str | None:
    """Why the kernel for a ``dtype`` cache cannot serve (mixboard.compiled_kernels); None when it can."""
    # the bfloat16 build's source includes the float32 one's
    return compiled_kernels.kernel_unusable(KERNELS[dtype], includes=("_paged_decode.c",) if dtype != "float32" else ())


class SdpaCpuAttention(Backend):
    declaration = SDPA_CPU

    @classmethod
    def check(cls, spec, env):
        reasons = []
        if spec.dtype in KERNELS and (problem := kernel_unusable(spec.dtype)):  # other dtypes: the declaration's
            reasons.append(f"its compiled kernel {KERNELS[spec.dtype]} {problem} ({INSTALL_HINT})")
        if spec.num_heads // spec.num_kv_heads > MAX_GROUP:
            reasons.append(f"{spec.num_heads // spec.num_kv_heads} query heads per kv head; the kernel takes up to "
                           f"{MAX_GROUP}")
        if spec.head_size > MAX_HEAD_SIZE:
            reasons.append(f"head_size {spec.head_size} is over the kernel's {MAX_HEAD_SIZE}")
        return reasons

    @classmethod
    def builder(cls, spec, env):
        from .meta import build_meta, bytes_per_token

        # the kernel reads the block table itself: no gather plan; each prefill token's table row and key count
        return partial(build_meta, bytes_per_token=bytes_per_token(spec), workspace={}, decode_chunks=False,
                       prefill_rows=True)

    @classmethod
    def make_impl(cls, spec, env):
        from .cpu_impl import SdpaCpuAttentionImpl

        return SdpaCpuAttentionImpl(spec)
