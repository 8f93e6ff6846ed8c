"""Where Triton's kernels can serve a layer, in words ``explain`` shows: one rule for every
plugin whose backends run Triton kernels (mixboard-triton's own, mamba-ssm's, fla-core's).

Triton compiles for NVIDIA and AMD GPUs (torch calls both "cuda") and Intel's ("xpu"). On CPU the
same kernels run only in Triton's interpreter (``TRITON_INTERPRET=1``): numpy, one program at a
time, thousands of times slower than the CPU backends, the lane that verifies kernels without a
GPU (tests/triton_interp/), and in float32 only, since its bfloat16 and float16 results are
silently wrong. Reads the environment, imports neither torch nor triton.
"""

from __future__ import annotations

import os
from typing import Any, Iterable


def interpreter_on() -> bool:
    """Whether Triton runs kernels in its interpreter, as Triton reads ``TRITON_INTERPRET``."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def triton_reasons(env: Any, dtypes: Iterable[str]) -> list[str]:
    """Why Triton's kernels cannot serve a layer computed in ``dtypes`` (its dtype, and its state's
    where that differs) in ``env``: the device, the interpreter's dtypes, the GPU's generation.
    Empty when they can."""
    dtypes = sorted(set(dtypes))
    reasons = []
    interpreted = interpreter_on()
    if env.device == "cpu" and not interpreted:
        reasons.append("runs on cpu only under Triton's interpreter (TRITON_INTERPRET=1), a test lane thousands "
                       "of times slower than the CPU backends; on a GPU otherwise")
    elif interpreted:
        reasons += [f"Triton's interpreter (TRITON_INTERPRET=1) gives wrong {dtype} results; float32 only there"
                    for dtype in dtypes if dtype != "float32"]
    cap = env.capability  # NVIDIA's only: None on ROCm, XPU and where unknown
    if cap is not None and cap < (7, 0):
        reasons.append(f"Triton needs compute capability 7.0 or newer; this GPU has {env.capability_text}")
    elif cap is not None and cap < (8, 0) and "bfloat16" in dtypes:
        reasons.append(f"bfloat16 needs compute capability 8.0 or newer; this GPU has {env.capability_text} "
                       "(use float16 or float32)")
    return reasons
