"""Backend ``mamba2_triton``: mamba-ssm's Triton SSD kernels on GPUs.

Declarations only; torch and mamba-ssm are imported when the backend is
built (``triton_impl.py``). Written against mamba-ssm 2.2/2.3 and Triton 3.
On NVIDIA the compute capability limits it; on AMD (ROCm) Triton compiles
for the GPU's gfx architecture and the capability does not apply: ROCm
builds of mamba-ssm and Triton exist but are untested here.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from mixboard import Backend
from mixboard.kinds.mamba2 import Mamba2Spec

# mamba-ssm's gated RMSNorm kernel keeps one group of channels in one block of at most 64 KB.
NORM_GROUP_BYTES = 65536


class Mamba2Triton(Backend):
    name = "mamba2_triton"
    kind = "mamba2"
    priority = 100
    devices = ("cuda",)
    dtypes = ("float32", "bfloat16", "float16")
    requires = ("mamba_ssm", "triton")
    install_hint = ("pip install 'mixboard-mamba2[triton]' on a CUDA or ROCm machine; mamba-ssm compiles its "
                    "extensions there")
    api_version = 1
    description = ("mamba-ssm's Triton kernels: varlen chunked SSD scan, selective state update, "
                   "gated RMSNorm (NVIDIA GPUs; AMD through ROCm, untested)")

    @classmethod
    def check(cls, spec: Mamba2Spec, env: Any) -> list[str]:
        reasons = []
        cap = env.capability  # NVIDIA's only: None on ROCm (and where unknown), which these limits do not concern
        if cap is not None and cap < (7, 0):
            reasons.append(f"Triton needs compute capability 7.0 or newer; this GPU has {env.capability_text}")
        elif cap is not None and cap < (8, 0) and spec.dtype == "bfloat16":
            reasons.append(f"bfloat16 needs compute capability 8.0 or newer; this GPU has {env.capability_text} "
                           "(use float16 or float32)")
        itemsize = 4 if spec.dtype == "float32" else 2
        group = spec.d_inner // spec.n_groups
        if group * itemsize > NORM_GROUP_BYTES:
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
