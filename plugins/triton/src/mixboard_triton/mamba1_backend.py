"""``mamba1_triton``: Mamba1 on mixboard's Triton kernels: the causal conv
(``_conv.py``, shared with short_conv) and the selective scan and its
one-token update (``_scan.py``); the x_proj and dt_proj products between
them are torch matmuls.

Its facts are declarations.py's; listing and selecting import neither torch nor triton.
"""

from __future__ import annotations

from functools import partial

from mixboard import Backend

from .availability import triton_reasons
from .declarations import MAMBA1_TRITON

MAX_D_STATE = 256  # h is [channels, d_state] in registers; the block of channels shrinks as d_state grows


class Mamba1Triton(Backend):
    declaration = MAMBA1_TRITON

    @classmethod
    def check(cls, spec, env):
        reasons = triton_reasons(spec, env)
        if spec.d_state > MAX_D_STATE:
            reasons.append(f"d_state {spec.d_state} is above the kernel's {MAX_D_STATE}")
        if spec.dt_bc_norms:
            reasons.append("its kernels have no RMS norms of dt, B and C (the layer has dt_bc_norms, as Jamba's)")
        if spec.conv_dtype != spec.ssm_dtype:
            reasons.append(f"its conv kernels keep the conv state in the SSM state's dtype; the layer asks for "
                           f"conv_state_dtype {spec.conv_state_dtype}")
        return reasons

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec, env):
        from .mamba1_impl import Mamba1TritonImpl

        return Mamba1TritonImpl(spec)
