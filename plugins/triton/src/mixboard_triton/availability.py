"""Where this plugin's backends run, and the checks they share.

Triton compiles its kernels for NVIDIA and AMD GPUs (torch calls both
"cuda"; ROCm's Triton targets the GPU's gfx architecture) and for Intel
GPUs ("xpu", through pytorch-triton-xpu). On CPU the same kernels run only
in Triton's interpreter (``TRITON_INTERPRET=1``): numpy, one program at a
time, thousands of times slower than the CPU backends. That is the lane that
verifies the kernels without a GPU (tests/triton_interp/), in float32 only:
the interpreter's bfloat16 and float16 results are silently wrong.

Nothing here imports torch or triton, so listing and explaining stay fast.
"""

from __future__ import annotations

from typing import Any

from mixboard.triton_reasons import triton_reasons as core_reasons

DEVICES = ("cuda", "xpu", "cpu")  # cpu: under Triton's interpreter only (triton_reasons says so)

# Among the first-party values (docs/plugins.md, "Priorities"): above portable PyTorch (10), so that on a
# GPU without a vendor library for the layer (AMD and Intel mostly) these kernels serve; below the vendor
# libraries (100), which are faster where they run; and below the first-party CPU kernels (20), which are
# the only others that can compete with these on CPU: there these run only in Triton's interpreter, and
# a user who exports TRITON_INTERPRET=1 (to debug some Triton code) must still get the fast CPU backends.
# `explain` then says "available, but 'sdpa_cpu' has higher priority (20 > 15)". On a GPU the value
# between 10 and 20 ranks them exactly as any value between 10 and 100 would.
PRIORITY = 15

INSTALL_HINT = ("pip install 'mixboard-triton[gpu]' on a GPU machine (NVIDIA: triton from PyPI; AMD: the triton "
                "of torch's ROCm build; Intel: pytorch-triton-xpu)")


def triton_reasons(spec: Any, env: Any) -> list[str]:
    """Why Triton's kernels cannot serve a layer of ``spec`` in ``env`` (mixboard.triton_reasons: the
    device, the interpreter's dtypes, the GPU's generation), for the layer's dtype and its state's."""
    return core_reasons(env, (spec.dtype, getattr(spec, "state_dtype", None) or spec.dtype))
