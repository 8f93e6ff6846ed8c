"""``mamba1_cuda``: Mamba1 on the fused kernels of mamba-ssm and causal-conv1d.

Its facts are declarations.py's. Listing and selecting must not pay for torch
or the CUDA libraries, which are imported when the backend is built
(``cuda_impl.py``).
"""

from __future__ import annotations

from functools import partial
from importlib import metadata

from mixboard import Backend

from .declarations import MAMBA1_CUDA
from .versions import MIN_VERSIONS, too_old


class Mamba1Cuda(Backend):
    declaration = MAMBA1_CUDA

    @classmethod
    def check(cls, spec, env):
        reasons = []
        if not 2 <= spec.d_conv <= 4:
            reasons.append(f"causal-conv1d supports conv widths 2 to 4; the layer's d_conv is {spec.d_conv}")
        if spec.d_inner % 8:
            reasons.append(f"causal-conv1d's channel-last layout (needed for initial conv states) wants d_inner "
                           f"divisible by 8; the layer's d_inner is {spec.d_inner}")
        if spec.d_state > 256:
            reasons.append(f"mamba-ssm's selective scan supports d_state up to 256; the layer's d_state is {spec.d_state}")
        if spec.dt_bc_norms:
            reasons.append("the impl does not apply RMS norms to dt, B and C (the layer has dt_bc_norms, as Jamba's)")
        if spec.conv_dtype != spec.dtype:
            reasons.append(f"causal-conv1d keeps the conv state in the layer's dtype ({spec.dtype}); the layer's is "
                           f"{spec.conv_dtype} (conv_state_dtype or state_dtype)")
        for dist, minimum in MIN_VERSIONS.items():
            installed = _installed(dist)
            if installed is not None and too_old(installed, minimum):
                reasons.append(f"{dist} {installed} is installed; mamba1_cuda needs {dist}>={minimum}: "
                               f"pip install -U '{dist}>={minimum}'")
        return reasons

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep

        return partial(SlotStep.plan, conv_width=spec.d_conv)

    @classmethod
    def make_impl(cls, spec, env):
        from .cuda_impl import Mamba1CudaImpl

        return Mamba1CudaImpl(spec)


def _installed(dist: str) -> str | None:
    """The installed version, or None where no metadata says (a source tree on sys.path)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
