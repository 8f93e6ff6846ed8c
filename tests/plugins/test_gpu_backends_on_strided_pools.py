"""The GPU backends hand pools whose records sit in larger pages (an engine's
hybrid cache) to their libraries as they are, with no copy, and write
nothing between records.

What runs here, on CPU, is each backend's own code around test doubles of
its libraries (tests/plugins/doubles, torch implementations of their
documented semantics): the kit's ``strided_pools`` case checks the outputs
against the oracle and the padding between records bit for bit. That the
real kernels honour ``stride(0)`` is read from their sources, not run here:
flash-attn's ``mha_varlen_fwd`` sets ``k_batch_stride = k.stride(0)`` for a
paged cache; causal-conv1d's ``causal_conv1d_update`` takes
``conv_state.stride(0..2)``; mamba-ssm's ``selective_state_update`` adds
``state_batch_idx * stride_state_batch``. A CUDA machine runs the same case
on the real libraries (tests/conformance/test_kit_first_party.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mixboard.selection import module_missing
from mixboard.testing.conformance import run_suite
from mixboard_flash_attn import FlashAttention
from mixboard_mamba1.cuda_backend import Mamba1Cuda
from mixboard_mamba2.triton_backend import Mamba2Triton
from mixboard_shortconv.cuda_backend import ShortConvCuda

DOUBLES = Path(__file__).parent / "doubles"
CASES = [  # (backend, where its doubles live, the libraries they stand for, a dtype it serves)
    (FlashAttention, DOUBLES, ("flash_attn",), "bfloat16"),
    (Mamba1Cuda, DOUBLES / "mamba1", ("mamba_ssm", "causal_conv1d"), "float32"),
    (Mamba2Triton, DOUBLES / "mamba2" / "site", ("mamba_ssm", "triton"), "float32"),
    (ShortConvCuda, DOUBLES / "shortconv", ("causal_conv1d",), "float32"),
]


def _forget(libraries):
    for name in list(sys.modules):
        if name.split(".")[0] in libraries:
            del sys.modules[name]
    sys.path_importer_cache.clear()
    module_missing.cache_clear()


def on_cpu(backend: type) -> type:
    """The backend as it would run on CUDA, declared for the CPU the doubles run on."""
    return type(f"{backend.__name__}OnCpu", (backend,), {
        "name": f"{backend.name}_on_cpu", "devices": ("cpu",), "check": classmethod(lambda cls, spec, env: [])})


@pytest.mark.parametrize("backend, doubles, libraries, dtype", CASES, ids=[c[0].name for c in CASES])
def test_strided_pools_through_the_doubles(monkeypatch, backend, doubles, libraries, dtype):
    if any(name in sys.modules and not str(getattr(sys.modules[name], "__file__", "")).startswith(str(DOUBLES))
           for name in libraries):
        pytest.skip("a real library is loaded in this process")
    _forget(libraries)
    monkeypatch.syspath_prepend(str(doubles))
    try:
        report = run_suite(on_cpu(backend), "cpu", (dtype,), select=["consecutive_slots", "strided_pools"])
    finally:
        monkeypatch.undo()
        _forget(libraries)
    assert [(r.case, r.status, r.reason) for r in report.results] == [
        (f"consecutive_slots[{dtype}]", "pass", None), (f"strided_pools[{dtype}]", "pass", None)]
