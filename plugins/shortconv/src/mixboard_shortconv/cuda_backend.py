"""``short_conv_cuda``: LFM2's gated short conv on causal-conv1d's CUDA kernels.

Relies on causal-conv1d >= 1.5.0 (Dao-AILab, PyPI ``causal-conv1d``):
``causal_conv1d_fn(x, weight, bias, activation=...)`` over a channel-last
row, and ``causal_conv1d_update(x, conv_state, weight, bias, activation,
conv_state_indices=...)``, whose ``conv_state_indices`` (new in 1.5.0) lets a
decode batch update its records in the slot pool in place.
"""

from __future__ import annotations

import re
from functools import partial
from importlib import metadata

from mixboard import Backend

from .declarations import SHORT_CONV_CUDA

MIN_VERSION = (1, 5)


class ShortConvCuda(Backend):
    declaration = SHORT_CONV_CUDA

    @classmethod
    def check(cls, spec, env):
        reasons = []
        if not 2 <= spec.conv_width <= 4:
            reasons.append(f"causal-conv1d's kernels take conv widths 2 to 4; this layer's conv_width is {spec.conv_width}")
        if spec.hidden_size % 8:
            reasons.append(f"causal-conv1d's channel-last kernel needs hidden_size divisible by 8; "
                           f"this layer's is {spec.hidden_size}")
        if spec.state_dtype not in (None, spec.dtype):
            reasons.append(f"causal-conv1d keeps the conv state in the activations' dtype ({spec.dtype}); this layer "
                           f"asks for state_dtype {spec.state_dtype} (use short_conv_torch, or drop state_dtype)")
        version = installed_version()
        if version is not None and release(version) < MIN_VERSION:
            reasons.append(f"causal-conv1d {version} is installed; this backend needs 1.5 or newer "
                           f"(conv_state_indices): pip install -U 'causal-conv1d>=1.5'")
        return reasons

    @classmethod
    def builder(cls, spec, env):
        from mixboard.ops.slot_step import SlotStep  # imports torch: only when a model is built

        return partial(SlotStep.plan, conv_width=spec.conv_width)

    @classmethod
    def make_impl(cls, spec, env):
        from .cuda_impl import ShortConvCudaImpl, load_kernels

        return ShortConvCudaImpl(spec, *load_kernels())


def installed_version() -> str | None:
    """causal-conv1d's version from its distribution metadata, without
    importing it; None when no distribution says (e.g. a source checkout)."""
    try:
        return metadata.version("causal-conv1d")
    except metadata.PackageNotFoundError:
        return None


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string; (0, 0) when it does not start with them."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)
