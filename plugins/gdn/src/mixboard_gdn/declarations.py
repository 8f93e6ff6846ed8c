"""mixboard-gdn's backends, declared once each (mixboard.Declaration); the classes in torch_backend.py and
fla_backend.py hold their code. Imports neither torch nor fla."""

from mixboard import Declaration

# What both backends share: the plugin's own kind (kind.py), every dtype.
PLUGIN = Declaration(kind="gated_delta_net", dtypes=("float32", "bfloat16", "float16"), api_version=1)

GDN_TORCH = PLUGIN(
    name="gdn_torch",
    priority=10,
    devices=("*",),
    capture="never",  # its decodes read SlotStep.decode_range, a per-step tuple; its prefills loop over ints
    description="Gated DeltaNet in PyTorch: chunked prefill scan, batched decode step (any torch device)",
)

GDN_FLA = PLUGIN(
    name="gdn_fla",
    priority=100,
    devices=("cuda", "cpu"),  # cpu: under Triton's interpreter only (check)
    requires=("fla", "triton"),
    install_hint="pip install 'mixboard-gdn[fla]' on a CUDA or ROCm machine (fla-core 0.6, Triton 3)",
    capture="never",  # unverified without a GPU; plans like gdn_torch (SlotStep, per-step tuples)
    description=("fla-core's Triton kernels: varlen chunked gated delta rule for prefills, fused recurrent "
                 "step for decodes (NVIDIA GPUs; AMD through ROCm, untested)"),
)
