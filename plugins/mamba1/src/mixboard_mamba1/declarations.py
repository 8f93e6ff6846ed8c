"""mixboard-mamba1's backends, declared once each (mixboard.Declaration); the classes in torch_backend.py,
cpu_backend.py and cuda_backend.py hold their code. Imports neither torch nor a kernel."""

from mixboard import Declaration

PLUGIN = Declaration(kind="mamba1", api_version=1)  # what every backend shares
ALL_DTYPES = ("float32", "bfloat16", "float16")

MAMBA1_TORCH = PLUGIN(
    name="mamba1_torch",
    priority=10,
    devices=("*",),
    dtypes=ALL_DTYPES,
    capture="never",  # its decodes read SlotStep.decode_range, a per-step tuple; its prefills, ints
    description="portable PyTorch: chunked selective scan for prefills, one fused step for decodes",
)

MAMBA1_CPU = PLUGIN(
    name="mamba1_cpu",
    priority=20,  # above mamba1_torch, which serves everything this does not
    devices=("cpu",),
    dtypes=("float32", "bfloat16"),  # the SSM state float32 either way (its check)
    capture="never",  # its kernel reads SlotStep.decode_slots, made once per meta on first use
    description=("mamba1_torch with decode steps in one C call per layer (conv, projections and state update "
                 "read and written in the state pools in place); CPU, float32 or bfloat16, SSM state float32"),
)

MAMBA1_CUDA = PLUGIN(
    name="mamba1_cuda",
    priority=100,
    devices=("cuda",),
    dtypes=ALL_DTYPES,
    requires=("mamba_ssm", "causal_conv1d"),
    install_hint="pip install 'mixboard-mamba1[cuda]' (builds CUDA kernels; needs a CUDA toolchain)",
    capture="never",  # unverified without a GPU; plans like mamba1_torch (SlotStep)
    description="mamba-ssm's selective scan and state update, causal-conv1d's conv (CUDA)",
)
