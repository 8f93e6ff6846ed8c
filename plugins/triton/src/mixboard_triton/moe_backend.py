"""``moe_triton``: the experts' products in mixboard's Triton kernels (``_moe.py``), the step's
(token, expert) pairs grouped by expert, one program per (expert, tile of pairs, block of columns);
routing in torch, as moe_torch routes.

Its facts are declarations.py's; listing and selecting import neither torch nor triton.
"""

from __future__ import annotations

from mixboard import Backend

from .availability import triton_reasons
from .declarations import MOE_TRITON


class MoETriton(Backend):
    declaration = MOE_TRITON

    @classmethod
    def check(cls, spec, env):
        return triton_reasons(spec, env)

    @classmethod
    def make_impl(cls, spec, env):
        from .moe_impl import MoETritonImpl

        return MoETritonImpl(spec)
