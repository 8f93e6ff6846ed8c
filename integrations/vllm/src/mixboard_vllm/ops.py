"""``torch.ops.mixboard_vllm.mixer``: every slot-state layer's backend call, as one opaque op.

vLLM compiles its model (torch.compile: trace once on CPU, piecewise CUDA graphs on GPU). Python
that dynamo traces runs once, with the first batch, and is frozen into the graph: the step's
metadata, its sizes and the plan's choices would be baked in. So a layer's projections stay in
the graph and the part between them (the kind's boundary: what reads or writes state) is this op,
which dynamo does not trace into. It looks the layer up by name in vLLM's forward context, as
vLLM's own mixer ops do, and runs the planned backend eagerly, every step, with that step's
metadata. Attention needs no op of its own: vLLM's attention layer already calls its backend's
impl through ``vllm::unified_attention_with_output``.

Where vLLM splits its graph (piecewise CUDA graphs) the op is a splitting op
(``compat.split_graph_at``), so the planned backend runs outside every captured graph.
"""

from __future__ import annotations

import torch

from . import compat

NAME = "mixer"
QUALIFIED = f"{compat.OP_LIBRARY}::{NAME}"


def _mixer(projected: torch.Tensor, output: torch.Tensor, layer_name: str) -> None:
    """``projected``: the layer's in_proj output, every row vLLM ran (padding included);
    ``output``: the rows the layer's out_proj reads, written in place."""
    compat.forward_context_layer(layer_name).mixboard_mix(projected, output)


def _mixer_fake(projected: torch.Tensor, output: torch.Tensor, layer_name: str) -> None:
    return None  # writes ``output`` in place: nothing new to describe to the compiler


def register() -> None:
    """Define the op in this process (every process that may build a model calls it once)."""
    compat.register_op(NAME, _mixer, mutates=["output"], fake=_mixer_fake)


def mixer(projected: torch.Tensor, output: torch.Tensor, layer_name: str) -> None:
    torch.ops.mixboard_vllm.mixer(projected, output, layer_name)


def check_graph_splits(vllm_config, kinds: set[str]) -> None:
    """Where vLLM captures piecewise CUDA graphs, every mixboard call must be a splitting op, or
    its backend would be replayed from a graph it never said it could live in. vLLM's default
    splitting ops include both (compat.split_graph_at); a user's own list may leave them out.
    Breakable CUDA graphs (VLLM_USE_BREAKABLE_CUDAGRAPH) break at ops wrapped for it when they
    were registered: one registered before the switch was set would be captured."""
    from .errors import StartupError

    if kinds - {"attention"} and compat.breakable_graphs() and not compat.op_breaks_graphs(NAME):
        raise StartupError(f"mixboard-vllm: VLLM_USE_BREAKABLE_CUDAGRAPH was set after {QUALIFIED} was registered, "
                           "so vLLM would capture mixboard's backends in its graphs; set it before vLLM starts")
    piecewise, splits = compat.graph_splits(vllm_config)
    if not piecewise:
        return
    need = {QUALIFIED} if kinds - {"attention"} else set()
    if "attention" in kinds:
        need.add(compat.ATTENTION_OP)
    missing = sorted(need - set(splits))
    if missing:
        raise StartupError(f"mixboard-vllm: vLLM captures CUDA graphs between its splitting ops, and mixboard's "
                           f"layers must run between them: add {' and '.join(missing)} to "
                           f"compilation_config.splitting_ops (now {splits}), leave splitting_ops unset, or set "
                           "cudagraph_mode to NONE")
