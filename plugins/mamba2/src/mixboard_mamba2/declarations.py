"""mixboard-mamba2's backends, declared once each (mixboard.Declaration); the classes in torch_backend.py,
cpu_backend.py and triton_backend.py hold their code. Imports neither torch nor a kernel."""

from mixboard import Declaration

PLUGIN = Declaration(kind="mamba2", api_version=1)  # what every backend shares
ALL_DTYPES = ("float32", "bfloat16", "float16")

MAMBA2_TORCH = PLUGIN(
    name="mamba2_torch",
    priority=10,
    devices=("*",),
    dtypes=ALL_DTYPES,
    capture="never",  # its decodes read SlotStep.decode_range, a per-step tuple; its prefills, ints
    description="Mamba-2 SSD in PyTorch: chunked prefill scan, batched decode step (any torch device)",
)

MAMBA2_CPU = PLUGIN(
    name="mamba2_cpu",
    priority=20,  # above mamba2_torch, which serves everything this does not
    devices=("cpu",),
    dtypes=("float32", "bfloat16"),  # bfloat16: summed in float32, the SSM state float32 (check)
    capture="never",  # its kernels walk CommonBatchMetadata.sequence_rows, made on first use
    description=("mamba2_torch with the causal conv, the prefills' SSD scan (one sequence and head at a time, "
                 "its chunks in cache), the decodes' state update (in place in the pool) and the gated norm "
                 "in C; CPU, float32 and bfloat16 (SSM state in float32)"),
)

MAMBA2_TRITON = PLUGIN(
    name="mamba2_triton",
    priority=100,
    devices=("cuda", "cpu"),  # cpu: under Triton's interpreter only (check)
    dtypes=ALL_DTYPES,
    requires=("mamba_ssm", "triton"),
    install_hint=("pip install 'mixboard-mamba2[triton]' on a CUDA or ROCm machine; mamba-ssm compiles its "
                  "extensions there"),
    capture="never",  # unverified without a GPU; plans like mamba2_torch (SlotStep)
    description=("mamba-ssm's Triton kernels: varlen chunked SSD scan, selective state update, "
                 "gated RMSNorm (NVIDIA GPUs; AMD through ROCm, untested)"),
)
