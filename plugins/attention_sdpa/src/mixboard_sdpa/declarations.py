"""mixboard-sdpa's backends, declared once each (mixboard.Declaration); the classes in backend.py and
cpu_backend.py hold their code. Imports neither torch nor the kernel."""

from mixboard import Declaration, Option

MAX_GROUP = 64  # query heads per kv head (the C kernel's stack arrays: _paged_decode.c)
MAX_HEAD_SIZE = 256
# sdpa_cpu's kernel, built once per cache dtype (the layer's: attention's state contract)
KERNELS = {"float32": "mixboard_sdpa._paged_decode", "bfloat16": "mixboard_sdpa._paged_decode_bf16"}

PLUGIN = Declaration(kind="attention", api_version=1)  # what both backends share

SDPA = PLUGIN(
    name="sdpa",
    priority=10,
    devices=("*",),
    dtypes=("float32", "bfloat16", "float16"),
    capture="never",  # its decodes are planned per step as Python ints and gathers whose shapes change (meta.py)
    description=("portable PyTorch: scaled_dot_product_attention over the paged cache; "
                 "decodes batched; explicit softmax only for logits soft-capping"),
    # The decodes' keys and values are gathered into two workspaces of up to this size each, reused every
    # step: larger means fewer, larger attention calls per step; smaller bounds the memory the step holds.
    options=(
        Option("decode_chunk_mib", int, 64, "MiB of gathered keys (and again of values) per batched decode call: "
               "more is fewer calls, less bounds the workspace each attention group keeps", minimum=1),
    ),
)

SDPA_CPU = PLUGIN(
    name="sdpa_cpu",
    priority=20,  # above sdpa, which serves everything this does not
    devices=("cpu",),
    dtypes=("float32", "bfloat16"),
    capture="uniform_decode",  # a step of decodes reads only the metadata's tensors (its prefills are planned in ints)
    description=("sdpa with decodes and causal prefills in a C kernel that reads the paged cache in place "
                 f"(no gather; float32 arithmetic); CPU, float32 or bfloat16, up to {MAX_GROUP} query heads per "
                 f"kv head, head size up to {MAX_HEAD_SIZE}"),
)
