"""Every first-party backend runs the conformance kit, as a vendor's would.

The portable backends run here in float32 and bfloat16 (float16 adds
little the other two miss, and the file stays fast); the GPU ones
are skipped on a machine without CUDA, each case with the backend's own
reasons (device, missing library), and run on a CUDA machine that has
their libraries.
"""

from mixboard.testing.conformance import (
    AttentionConformance, Mamba1Conformance, Mamba2Conformance, MoEConformance, ShortConvConformance,
)

PORTABLE_DTYPES = ("float32", "bfloat16")


class TestSdpa(AttentionConformance):
    backend = "sdpa"
    device = "cpu"
    dtypes = PORTABLE_DTYPES


class TestSdpaCpu(AttentionConformance):
    backend = "sdpa_cpu"
    device = "cpu"
    dtypes = ("float32", "bfloat16")  # all it declares


class TestFlashAttn(AttentionConformance):
    backend = "flash_attn"
    device = "cuda"  # its state_spec's block_multiple (256) sizes the kit's blocks


class TestMamba1Torch(Mamba1Conformance):
    backend = "mamba1_torch"
    device = "cpu"
    dtypes = PORTABLE_DTYPES


class TestMamba1Cpu(Mamba1Conformance):
    backend = "mamba1_cpu"
    device = "cpu"
    dtypes = ("float32", "bfloat16")  # all it declares (bfloat16: the cases with a float32 SSM state)


class TestMamba1Cuda(Mamba1Conformance):
    backend = "mamba1_cuda"
    device = "cuda"


class TestMamba2Torch(Mamba2Conformance):
    backend = "mamba2_torch"
    device = "cpu"
    dtypes = PORTABLE_DTYPES


class TestMamba2Cpu(Mamba2Conformance):
    backend = "mamba2_cpu"
    device = "cpu"
    dtypes = ("float32", "bfloat16")  # all it declares (bfloat16: the cases with a float32 SSM state)


class TestMamba2Triton(Mamba2Conformance):
    backend = "mamba2_triton"
    device = "cuda"


class TestShortConvTorch(ShortConvConformance):
    backend = "short_conv_torch"
    device = "cpu"
    dtypes = PORTABLE_DTYPES


class TestShortConvCpu(ShortConvConformance):
    backend = "short_conv_cpu"
    device = "cpu"
    dtypes = ("float32", "bfloat16")  # all it declares


class TestShortConvCuda(ShortConvConformance):
    backend = "short_conv_cuda"
    device = "cuda"


# mixboard-triton's kernels: here on a GPU (every dtype); on CPU they run in Triton's interpreter,
# in float32, in the lane tests/triton_interp/ci.sh (lane_triton_plugin.py).
class TestTritonAttn(AttentionConformance):
    backend = "triton_attn"
    device = "cuda"


class TestShortConvTriton(ShortConvConformance):
    backend = "short_conv_triton"
    device = "cuda"


class TestMamba1Triton(Mamba1Conformance):
    backend = "mamba1_triton"
    device = "cuda"


class TestMoETriton(MoEConformance):
    backend = "moe_triton"
    device = "cuda"
