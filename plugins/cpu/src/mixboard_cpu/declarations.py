"""mixboard-cpu's backends, declared once each (mixboard.Declaration); the classes in *_backend.py hold
their code. Imports neither torch nor a kernel."""

from mixboard import Declaration, Option

PLUGIN = Declaration(devices=("cpu",), dtypes=("float32",), api_version=1)  # every backend: CPU, float32
# The C kernels (CompiledKernel): above oneDNN's (15) and the portable *_torch backends (10), which serve
# every layer these do not; other dtypes go to the *_torch backends.
C_KERNEL = PLUGIN(priority=20)
# Torch's oneDNN product: below the panels, above F.linear; pure Python, no build needed.
ONEDNN = PLUGIN(priority=15)

# The three layouts benchmarks/README.md ("Projections") measures: packed is the fastest from about 16
# rows; as loaded costs no reorder at load and matches it for one-row decodes; column-major is what a
# tied table keeps (embedding_onednn). Which wins is the machine's: an operator measures and sets it.
LAYOUTS = ("packed", "as_loaded", "column_major")

LINEAR_CPU = C_KERNEL(
    name="linear_cpu",
    kind="linear",
    # each output sums its in_features products in order, in one chain (so the thread count never changes
    # a bit): its float32 error grows with in_features, past the kit's 1e-5 by in_features 2048
    tolerances={"float32": 3e-5},
    description=("the weight stored once as 16-row panels, streamed once per call; gated: gate and up panels "
                 "interleaved, the SwiGLU gate applied per tile; CPU, float32"),
)

LINEAR_ONEDNN = ONEDNN(
    name="linear_onednn",
    kind="linear",
    description=("torch's oneDNN product, the weight laid out once at load (packed into oneDNN's blocked "
                 "layout unless the layout option says otherwise; F.linear where this torch has no oneDNN); "
                 "CPU, float32"),
    options=(
        Option("layout", str, "packed", "how each weight is stored for the product: packed (reordered once into "
               "oneDNN's blocked layout), as_loaded (no reorder: quicker load), column_major (stored transposed)",
               choices=LAYOUTS),
    ),
)

RMS_NORM_CPU = C_KERNEL(
    name="rms_norm_cpu",
    kind="rms_norm",
    description=("one C pass per row: the branch's output added into the residual as the kind allows, then "
                 "the norm; heads of a fused product [T, heads, D] normalized where they lie; CPU, float32"),
)

ROTARY_CPU = C_KERNEL(
    name="rotary_cpu",
    kind="rotary",
    description=("q and k rotated in place in one C call (one for both where k follows q in one buffer), "
                 "the table read by position: no gathered rows, no rotated copy; CPU, float32"),
)

EMBEDDING_CPU = C_KERNEL(
    name="embedding_cpu",
    kind="embedding",
    tolerances={"float32": 3e-5},  # its LM head is linear_cpu's product: the same bound
    description=("a tied table stored once as 16-row panels: the LM head is linear_cpu's product over them, "
                 "a lookup reads a row out of them; CPU, float32, tied tables"),
)

EMBEDDING_ONEDNN = ONEDNN(
    name="embedding_onednn",
    kind="embedding",
    description=("a tied table stored once, column-major: the LM head is oneDNN's product over it as it "
                 "lies, a lookup reads strided rows; CPU, float32, tied tables"),
)

ARGMAX_CPU = C_KERNEL(
    name="argmax_cpu",
    kind="argmax",
    description="each row's maximum in one vectorized pass, then its first index (NaN first, as torch); CPU, float32",
)

MOE_CPU = C_KERNEL(
    name="moe_cpu",
    kind="moe",
    # each output sums its products in order, in one chain (linear_cpu's bound, for the same reason)
    tolerances={"float32": 3e-5},
    description=("every expert's gate/up and down weights stored once as 16-row panels; the rows sorted by "
                 "expert once, then per expert with rows one gated product (SwiGLU applied per tile) and one "
                 "down product; CPU, float32"),
)
