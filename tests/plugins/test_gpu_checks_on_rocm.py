"""The first-party GPU backends' checks read an AMD GPU as AMD: no NVIDIA
capability limit applies to it, and what the ROCm builds cannot do is said."""

from __future__ import annotations

import dataclasses

import pytest

from mixboard import AttentionSpec, Mamba1Spec, Mamba2Spec, ShortConvSpec, simulate
from mixboard_flash_attn import FlashAttention
from mixboard_mamba1.cuda_backend import Mamba1Cuda
from mixboard_mamba2.triton_backend import Mamba2Triton
from mixboard_shortconv.cuda_backend import ShortConvCuda

MI300, MI250, RX7900, MI50 = (simulate("cuda", arch=a) for a in ("gfx942", "gfx90a", "gfx1100", "gfx906"))
BF16 = AttentionSpec(dtype="bfloat16")


@pytest.mark.parametrize("env", [MI300, MI250, RX7900])
def test_flash_attn_serves_the_gpus_its_rocm_build_supports(env):
    assert FlashAttention.check(BF16, env) == []


def test_flash_attn_refuses_other_amd_gpus_and_softcap_on_rocm():
    (reason,) = FlashAttention.check(BF16, MI50)
    assert "flash-attn's ROCm build supports gfx90a, gfx942" in reason and "this GPU is gfx906" in reason
    (reason,) = FlashAttention.check(dataclasses.replace(BF16, logits_soft_cap=30.0), MI300)
    assert "ignores logits_soft_cap" in reason
    # on NVIDIA softcap is supported and the capability still rules
    assert FlashAttention.check(dataclasses.replace(BF16, logits_soft_cap=30.0), simulate("cuda", arch="sm_80")) == []
    (reason,) = FlashAttention.check(BF16, simulate("cuda", arch="sm_75"))
    assert "this GPU has 7.5" in reason
    (reason,) = FlashAttention.check(BF16, simulate("cuda"))
    assert "GPU is unknown; pass --arch (sm_90, gfx942) or --capability" in reason


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_mamba2_triton_takes_no_nvidia_limit_on_amd(dtype):
    assert Mamba2Triton.check(Mamba2Spec(dtype=dtype), MI300) == []
    assert Mamba2Triton.check(Mamba2Spec(dtype="bfloat16"), simulate("cuda", arch="sm_75"))  # NVIDIA's still applies


def test_causal_conv1d_and_mamba_ssm_backends_serve_rocm():
    # mamba-ssm and causal-conv1d build for ROCm 6.1+ (their READMEs): nothing here depends on the GPU vendor
    assert Mamba1Cuda.check(Mamba1Spec(), MI300) == Mamba1Cuda.check(Mamba1Spec(), simulate("cuda", arch="sm_90"))
    assert ShortConvCuda.check(ShortConvSpec(), MI300) == ShortConvCuda.check(ShortConvSpec(), simulate("cuda", "9.0"))
