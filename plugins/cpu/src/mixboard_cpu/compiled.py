"""Whether the plugin's compiled modules are built, and what the backends
that need one share. Listing and selection read this module: it imports
neither torch nor a kernel."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from typing import ClassVar

from mixboard import Backend

INSTALL_HINT = "reinstall mixboard-cpu where a C compiler with OpenMP (gcc) is present, to build it"
PANELS = "mixboard_cpu._panels"  # the products (linear_cpu, embedding_cpu)
ROWS = "mixboard_cpu._rows"      # the row operations (rms_norm_cpu, rotary_cpu, argmax_cpu)


@lru_cache(maxsize=None)
def kernel_missing(module: str) -> bool:
    return importlib.util.find_spec(module) is None


class CompiledKernel(Backend):
    """A backend running one of the plugin's C kernels (declared with
    declarations.C_KERNEL: CPU, float32, priority 20); unavailable, saying
    why, where its module did not build."""

    compiled: ClassVar[str]

    @classmethod
    def check(cls, spec, env):
        if kernel_missing(cls.compiled):
            return [f"its compiled kernel {cls.compiled} is not built ({INSTALL_HINT})"]
        return []
