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

import os
from typing import Any

DEVICES = ("cuda", "xpu", "cpu")  # cpu: under Triton's interpreter only (gpu_reasons says so)

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


def triton_interpreter_on() -> bool:
    """Whether Triton runs kernels in its interpreter, as Triton reads ``TRITON_INTERPRET``
    (read here, not imported: checking imports nothing)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def triton_reasons(spec: Any, env: Any) -> list[str]:
    """Why Triton's kernels cannot serve a layer of ``spec`` in ``env`` (the device, the
    interpreter's dtypes, the GPU's generation); empty when they can."""
    reasons = []
    interpreted = triton_interpreter_on()
    if env.device == "cpu" and not interpreted:
        reasons.append("runs on cpu only under Triton's interpreter (TRITON_INTERPRET=1), a test lane thousands "
                       "of times slower than the CPU backends; on a GPU otherwise")
    elif interpreted:
        for dtype in sorted({spec.dtype, getattr(spec, "state_dtype", None) or spec.dtype} - {"float32"}):
            reasons.append(f"Triton's interpreter (TRITON_INTERPRET=1) gives wrong {dtype} results; "
                           "float32 only there")
    cap = env.capability  # NVIDIA's only: None on ROCm, XPU and where unknown
    if cap is not None and cap < (7, 0):
        reasons.append(f"Triton needs compute capability 7.0 or newer; this GPU has {env.capability_text}")
    elif cap is not None and cap < (8, 0) and "bfloat16" in (spec.dtype, getattr(spec, "state_dtype", None)):
        reasons.append(f"bfloat16 needs compute capability 8.0 or newer; this GPU has {env.capability_text} "
                       "(use float16 or float32)")
    return reasons
