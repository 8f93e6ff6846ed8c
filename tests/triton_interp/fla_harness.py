"""Test-harness shims that let fla-core's own Triton kernels (Gated DeltaNet's
``chunk_gated_delta_rule`` and ``fused_recurrent_gated_delta_rule``) run on CPU
tensors under Triton's interpreter (TRITON_INTERPRET=1). Nothing here belongs
in a backend; fla-core is installed in .venv-triton (ci.sh), no sources fetched.

* ``TRITON_INTERPRET=1`` must be set before any ``@triton.jit`` runs.
* One autotune config per kernel: with several, Triton's Autotuner benchmarks
  them (and ``cache_results``, on in fla by default, hashes the GPU target),
  both through ``driver.active``, which has no driver on a CPU machine
  ("0 active drivers"). Timings mean nothing in the interpreter anyway, so the
  first config left after the kernel's own pruning is the one that runs.
* ``range`` in fla's kernels yields Triton tensors: compiled, a loop's
  induction variable is an int32 tensor and fla calls ``i_t.to(tl.int64)`` on
  it (chunk_delta_h.py); the interpreter runs the loop as Python's ``range``,
  whose ints have no ``.to`` ("'int' object has no attribute 'to'"). The
  interpreter already rewrites ``tl.range``, not the builtin, so while an fla
  kernel runs its module gets a ``range`` of its own, removed afterwards.
"""

from __future__ import annotations

import os
import sys


def fla_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("fla") is not None


def _as_int(value):
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        value = value.value
    if isinstance(value, tl.tensor):
        return int(value.handle.data.item())
    return int(value)


def _tensor_range(*args):
    """``range`` whose items are int32 Triton tensors, as a compiled loop's induction variable is."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    for i in range(*(_as_int(a) for a in args)):
        yield tl.tensor(TensorHandle(np.array([i], dtype=np.int32), tl.int32), tl.int32)


def _patch_range_in_fla_kernels() -> None:
    from triton.runtime import interpreter

    original = interpreter._patch_lang
    if getattr(original, "_mixboard_cpu_shim", False):
        return

    def patch_lang(fn):
        scope = original(fn)
        if fn.__module__.startswith("fla."):
            scope.set_attr(sys.modules[fn.__module__], "range", _tensor_range)  # restored with the rest
        return scope

    patch_lang._mixboard_cpu_shim = True
    interpreter._patch_lang = patch_lang


def enable() -> None:
    """Call once per process, before any fla kernel runs."""
    os.environ["TRITON_INTERPRET"] = "1"
    _patch_range_in_fla_kernels()
    from triton.runtime.autotuner import Autotuner

    original = Autotuner.prune_configs
    if getattr(original, "_mixboard_cpu_shim", False):
        return

    def prune_configs(self, kwargs):
        return original(self, kwargs)[:1]

    prune_configs._mixboard_cpu_shim = True
    Autotuner.prune_configs = prune_configs
