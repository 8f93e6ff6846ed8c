"""Backend ``mamba2_triton``: mamba-ssm's Triton SSD kernels on GPUs.

Its facts are declarations.py's; torch and mamba-ssm are imported when the
backend is built (``triton_impl.py``). Written against mamba-ssm 2.2/2.3 and Triton 3.
On NVIDIA the compute capability limits it; on AMD (ROCm) Triton compiles
for the GPU's gfx architecture and the capability does not apply: ROCm
builds of mamba-ssm and Triton exist but are untested here.

On CPU it runs only under Triton's interpreter (``TRITON_INTERPRET=1``),
the lane that verifies the real kernels without a GPU: float32 only there,
as the interpreter's bfloat16 and float16 results are silently wrong.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from mixboard import Backend
from mixboard.triton_reasons import triton_reasons
from mixboard.kinds.mamba2 import Mamba2Spec

from .declarations import MAMBA2_TRITON

# mamba-ssm's gated RMSNorm kernel keeps one group of channels in one block of at most 64 KB.
NORM_GROUP_BYTES = 65536


class Mamba2Triton(Backend):
    declaration = MAMBA2_TRITON

    @classmethod
    def check(cls, spec: Mamba2Spec, env: Any) -> list[str]:
        reasons = triton_reasons(env, (spec.dtype, spec.ssm_dtype, spec.conv_dtype))  # the states' dtypes too
        itemsize = 4 if spec.dtype == "float32" else 2
        group = spec.d_inner // spec.n_groups
        if spec.gated_norm and group * itemsize > NORM_GROUP_BYTES:
            reasons.append(f"mamba-ssm's gated RMSNorm handles groups of up to {NORM_GROUP_BYTES // itemsize} "
                           f"{spec.dtype} channels; this layer's groups have {group} (d_inner / n_groups)")
        return reasons

    @classmethod
    def builder(cls, spec: Mamba2Spec, env: Any):
        from .triton_meta import build_meta

        return partial(build_meta, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec: Mamba2Spec, env: Any):
        from .triton_impl import Mamba2TritonImpl

        return Mamba2TritonImpl(spec)
