"""Test-harness shims that let mamba-ssm's own Triton kernels run on CPU
tensors under Triton's interpreter (TRITON_INTERPRET=1), without mamba-ssm's
CUDA extensions. Nothing here belongs in a backend.

* ``mamba_ssm`` is registered as a bare package over the unpacked sources
  (its ``__init__`` imports ``selective_scan_cuda``, which is not built);
  submodules (``mamba_ssm.ops.triton.*``) then import from the sources.
* ``TRITON_INTERPRET=1`` must be set before any ``@triton.jit`` runs.
* ``MAMBA_DETERMINISTIC=1``: mamba-ssm's ``autotune_configs`` keeps one config
  per kernel (the autotuner's benchmarking needs a GPU driver: "0 active drivers").
* ``torch.cuda.device(None)``: the kernels' wrappers open
  ``torch.cuda.device(x.device.index)``; a CPU tensor's index is None.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

MAMBA_SSM_VERSION = "2.3.2.post1"
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SRC = ROOT / ".cache" / "mamba-ssm" / f"mamba_ssm-{MAMBA_SSM_VERSION}"


def mamba_ssm_source() -> Path | None:
    """The unpacked sdist (the folder holding ``mamba_ssm/``), or None."""
    src = Path(os.environ.get("MIXBOARD_MAMBA_SSM_SRC", DEFAULT_SRC))
    return src if (src / "mamba_ssm" / "ops" / "triton" / "ssd_combined.py").is_file() else None


def enable(src: Path) -> None:
    """Call once per process, before anything imports triton's jit'd modules."""
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["MAMBA_DETERMINISTIC"] = "1"
    if "mamba_ssm" not in sys.modules:
        spec = importlib.machinery.ModuleSpec("mamba_ssm", None, is_package=True)
        spec.submodule_search_locations = [str(src / "mamba_ssm")]
        module = importlib.util.module_from_spec(spec)
        module.__version__ = MAMBA_SSM_VERSION
        sys.modules["mamba_ssm"] = module
    import torch

    original = torch.cuda.device
    if not getattr(original, "_mixboard_cpu_shim", False):
        def device(index):
            if index is None:
                return contextlib.nullcontext()
            return original(index)

        device._mixboard_cpu_shim = True
        torch.cuda.device = device
