"""mamba2_triton on mamba-ssm's own Triton kernels, run by Triton's
interpreter on CPU tensors, through the conformance kit (float32).

Here (the main suite): the selection rule. The kit on the real kernels is
lane_mamba2_triton.py, run by tests/triton_interp/ci.sh in its own venv
(.venv-triton: triton installed in the main venv makes transformers import
it, and the doubles tests of tests/plugins then skip). See README.md beside this file.
"""

from __future__ import annotations

import pytest

from mixboard import Mamba2Spec, simulate
from mixboard_mamba2.triton_backend import Mamba2Triton


def test_refused_on_cpu_without_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    reasons = Mamba2Triton.check(Mamba2Spec(), simulate("cpu"))
    assert reasons == ["runs on cpu only under Triton's interpreter (TRITON_INTERPRET=1), a test lane thousands "
                       "of times slower than the CPU backends; on a GPU otherwise"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_refused_under_the_interpreter(monkeypatch, dtype):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert Mamba2Triton.check(Mamba2Spec(dtype=dtype), simulate("cpu")) == [
        f"Triton's interpreter (TRITON_INTERPRET=1) gives wrong {dtype} results; float32 only there"]
    assert Mamba2Triton.check(Mamba2Spec(dtype="float32"), simulate("cpu")) == []
