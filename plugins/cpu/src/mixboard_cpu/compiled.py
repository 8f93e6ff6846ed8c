"""Whether the plugin's compiled modules can serve, and what the backends
that need one share. Listing and selection read this module: it imports
neither torch nor a kernel."""

from __future__ import annotations

from functools import lru_cache
from typing import ClassVar

from mixboard import Backend, compiled_kernels

INSTALL_HINT = "reinstall mixboard-cpu where a C compiler with OpenMP (gcc) is present, to build it"
PANELS = "mixboard_cpu._panels"  # the products (linear_cpu, embedding_cpu)
ROWS = "mixboard_cpu._rows"      # the row operations (rms_norm_cpu, rotary_cpu, argmax_cpu)


@lru_cache(maxsize=None)
def kernel_unusable(module: str) -> str | None:
    """Why ``module`` cannot serve (mixboard.compiled_kernels); None when it can."""
    return compiled_kernels.kernel_unusable(module)


class CompiledKernel(Backend):
    """A backend running one of the plugin's C kernels (declared with
    declarations.C_KERNEL: CPU, float32, priority 20); unavailable, saying
    why, where its module did not build or is older than its source."""

    compiled: ClassVar[str]

    @classmethod
    def check(cls, spec, env):
        if problem := kernel_unusable(cls.compiled):
            return [f"its compiled kernel {cls.compiled} {problem} ({INSTALL_HINT})"]
        return []
