"""mixboard-triton's backends, declared once each (mixboard.Declaration); the classes in *_backend.py hold
their code. Imports neither torch nor triton."""

from mixboard import Declaration

from .availability import DEVICES, INSTALL_HINT, PRIORITY

# Every backend: mixboard's own Triton kernels, on the GPUs Triton compiles for (and cpu under its
# interpreter, for tests: availability.triton_reasons); priority 15, availability.py says why.
PLUGIN = Declaration(
    priority=PRIORITY,
    devices=DEVICES,
    dtypes=("float32", "bfloat16", "float16"),
    requires=("triton",),
    install_hint=INSTALL_HINT,
    api_version=1,
)

TRITON_ATTN = PLUGIN(
    name="triton_attn",
    kind="attention",
    capture="never",  # unverified without a GPU
    description=("mixboard's Triton kernel: paged prefill and decode over the block table, GQA, sliding "
                 "window, soft cap; NVIDIA, AMD and Intel GPUs (cpu: Triton's interpreter, float32, tests only)"),
)

SHORT_CONV_TRITON = PLUGIN(
    name="short_conv_triton",
    kind="short_conv",
    capture="never",  # unverified without a GPU; plans like short_conv_torch (SlotStep)
    description=("mixboard's Triton kernels: y = C * conv(B * x) over a ragged step, and the one-token step, "
                 "states read and written in their slots; any conv width"),
)

MAMBA1_TRITON = PLUGIN(
    name="mamba1_triton",
    kind="mamba1",
    capture="never",  # unverified without a GPU; plans like mamba1_torch (SlotStep)
    description=("mixboard's Triton kernels: causal conv and selective scan over a ragged step, the one-token "
                 "conv step and state update for decodes; states in their slots, any conv width"),
)

MOE_TRITON = PLUGIN(
    name="moe_triton",
    kind="moe",
    # capture: Backend's default ("never")
    description=("mixboard's Triton kernels: routing in float32 (torch), the (token, expert) pairs sorted by "
                 "expert once, one program per tile of an expert's pairs for gate/up (SwiGLU or relu^2 applied "
                 "in the tile) and one for down; the weighted sum over a token's experts in float32"),
)
