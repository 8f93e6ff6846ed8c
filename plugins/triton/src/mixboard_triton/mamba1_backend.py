"""``mamba1_triton``: Mamba1 on mixboard's Triton kernels: the causal conv
(``_conv.py``, shared with short_conv) and the selective scan and its
one-token update (``_scan.py``); the x_proj and dt_proj products between
them are torch matmuls.

Declarations only: listing and selecting import neither torch nor triton.
"""

from __future__ import annotations

from functools import partial

from mixboard import Backend

from .availability import DEVICES, INSTALL_HINT, PRIORITY, triton_reasons

MAX_D_STATE = 256  # h is [channels, d_state] in registers; the block of channels shrinks as d_state grows


class Mamba1Triton(Backend):
    name = "mamba1_triton"
    kind = "mamba1"
    priority = PRIORITY
    devices = DEVICES
    dtypes = ("float32", "bfloat16", "float16")
    requires = ("triton",)
    install_hint = INSTALL_HINT
    api_version = 1
    capture = "never"  # unverified without a GPU; plans like mamba1_torch (SlotStep)
    description = ("mixboard's Triton kernels: causal conv and selective scan over a ragged step, the one-token "
                   "conv step and state update for decodes; states in their slots, any conv width")

    @classmethod
    def check(cls, spec, env):
        reasons = triton_reasons(spec, env)
        if spec.d_state > MAX_D_STATE:
            reasons.append(f"d_state {spec.d_state} is above the kernel's {MAX_D_STATE}")
        if spec.dt_bc_norms:
            reasons.append("its kernels have no RMS norms of dt, B and C (the layer has dt_bc_norms, as Jamba's)")
        return reasons

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec, env):
        from .mamba1_impl import Mamba1TritonImpl

        return Mamba1TritonImpl(spec)
