"""Backend ``mamba2_triton``: mamba-ssm's Triton SSD kernels on GPUs.

Declarations only; torch and mamba-ssm are imported when the backend is
built (``triton_impl.py``). Written against mamba-ssm 2.2/2.3 and Triton 3.
On NVIDIA the compute capability limits it; on AMD (ROCm) Triton compiles
for the GPU's gfx architecture and the capability does not apply: ROCm
builds of mamba-ssm and Triton exist but are untested here.

On CPU it runs only under Triton's interpreter (``TRITON_INTERPRET=1``),
the lane that verifies the real kernels without a GPU: float32 only there,
as the interpreter's bfloat16 and float16 results are silently wrong.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from mixboard import Backend
from mixboard.kinds.mamba2 import Mamba2Spec

# mamba-ssm's gated RMSNorm kernel keeps one group of channels in one block of at most 64 KB.
NORM_GROUP_BYTES = 65536


def triton_interpreter_on() -> bool:
    """Whether Triton runs its kernels in its interpreter, as Triton reads ``TRITON_INTERPRET``
    (read, not imported: the check imports nothing)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


class Mamba2Triton(Backend):
    name = "mamba2_triton"
    kind = "mamba2"
    priority = 100
    devices = ("cuda", "cpu")  # cpu: under Triton's interpreter only (check)
    dtypes = ("float32", "bfloat16", "float16")
    requires = ("mamba_ssm", "triton")
    install_hint = ("pip install 'mixboard-mamba2[triton]' on a CUDA or ROCm machine; mamba-ssm compiles its "
                    "extensions there")
    api_version = 1
    capture = "never"  # unverified without a GPU; plans like mamba2_torch (SlotStep)
    description = ("mamba-ssm's Triton kernels: varlen chunked SSD scan, selective state update, "
                   "gated RMSNorm (NVIDIA GPUs; AMD through ROCm, untested)")

    @classmethod
    def check(cls, spec: Mamba2Spec, env: Any) -> list[str]:
        reasons = []
        interpreted = triton_interpreter_on()
        if env.device == "cpu" and not interpreted:
            reasons.append("runs on cpu only under Triton's interpreter (TRITON_INTERPRET=1), a test lane thousands "
                           "of times slower than the CPU backends; on a GPU otherwise")
        elif interpreted and spec.dtype != "float32":
            reasons.append(f"Triton's interpreter (TRITON_INTERPRET=1) gives wrong {spec.dtype} results; "
                           "float32 only there")
        cap = env.capability  # NVIDIA's only: None on ROCm (and where unknown), which these limits do not concern
        if cap is not None and cap < (7, 0):
            reasons.append(f"Triton needs compute capability 7.0 or newer; this GPU has {env.capability_text}")
        elif cap is not None and cap < (8, 0) and spec.dtype == "bfloat16":
            reasons.append(f"bfloat16 needs compute capability 8.0 or newer; this GPU has {env.capability_text} "
                           "(use float16 or float32)")
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
