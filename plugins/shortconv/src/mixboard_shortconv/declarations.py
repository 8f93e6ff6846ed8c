"""mixboard-shortconv's backends, declared once each (mixboard.Declaration); the classes in torch_backend.py,
cpu_backend.py and cuda_backend.py hold their code. Imports neither torch nor a kernel."""

from mixboard import Declaration

PLUGIN = Declaration(kind="short_conv", api_version=1)  # what every backend shares
ALL_DTYPES = ("float32", "bfloat16", "float16")

MAX_WIDTH = 8  # short_conv_cpu's kernel's window registers (_gated_conv.c)
# short_conv_cpu's kernel, built once per dtype (the layer's, its state's and its inputs' alike)
KERNELS = {"float32": "mixboard_shortconv._gated_conv", "bfloat16": "mixboard_shortconv._gated_conv_bf16"}

SHORT_CONV_TORCH = PLUGIN(
    name="short_conv_torch",
    priority=10,
    devices=("*",),
    dtypes=ALL_DTYPES,
    capture="never",  # its decodes read SlotStep.decode_range, a per-step tuple; its ragged conv indexes in forward
    description="portable PyTorch: one depthwise conv over the ragged step; decodes as one batched state update",
)

SHORT_CONV_CPU = PLUGIN(
    name="short_conv_cpu",
    priority=20,  # above short_conv_torch, which serves everything this does not
    devices=("cpu",),
    dtypes=tuple(KERNELS),
    capture="never",  # its kernel walks CommonBatchMetadata.sequence_rows, made once per step on first use
    description=("the gated conv of a whole step in one C call, states read and written in their slots; "
                 f"CPU, float32 or bfloat16 (state in the layer's dtype), conv width up to {MAX_WIDTH}"),
)

SHORT_CONV_CUDA = PLUGIN(
    name="short_conv_cuda",
    priority=100,
    devices=("cuda",),
    dtypes=ALL_DTYPES,
    requires=("causal_conv1d",),
    install_hint="pip install 'mixboard-shortconv[cuda]' (builds CUDA kernels)",
    capture="never",  # unverified without a GPU; plans like short_conv_torch (SlotStep)
    description="causal-conv1d's CUDA kernels: one channel-last conv over the ragged step; batched decode update",
)
