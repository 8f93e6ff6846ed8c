"""``moe_triton``: the experts' products in mixboard's Triton kernels (``_moe.py``), the step's
(token, expert) pairs grouped by expert, one program per (expert, tile of pairs, block of columns);
routing in torch, as moe_torch routes.

Declarations only: listing and selecting import neither torch nor triton.
"""

from __future__ import annotations

from mixboard import Backend

from .availability import DEVICES, INSTALL_HINT, PRIORITY, triton_reasons


class MoETriton(Backend):
    name = "moe_triton"
    kind = "moe"
    priority = PRIORITY
    devices = DEVICES
    dtypes = ("float32", "bfloat16", "float16")
    requires = ("triton",)
    install_hint = INSTALL_HINT
    api_version = 1
    description = ("mixboard's Triton kernels: routing in float32 (torch), the (token, expert) pairs sorted by "
                   "expert once, one program per tile of an expert's pairs for gate/up (SwiGLU or relu^2 applied "
                   "in the tile) and one for down; the weighted sum over a token's experts in float32")

    @classmethod
    def check(cls, spec, env):
        return triton_reasons(spec, env)

    @classmethod
    def make_impl(cls, spec, env):
        from .moe_impl import MoETritonImpl

        return MoETritonImpl(spec)
