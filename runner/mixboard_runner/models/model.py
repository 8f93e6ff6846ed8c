"""A causal LM assembled from blocks: embedding, pre-norm residual blocks
(mixer, optional MLP), final norm, LM head. Module names are the
checkpoint's, given by the architecture, so Hugging Face state dicts load as
they are."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from . import panels
from .linear import pack_linears, table_layout
from .mixers import MixerLayer


class Block(nn.Module):
    """x = x + mixer(norm(x)); then, if there is an MLP, x = x + mlp(mlp_norm(x)).

    The block takes and returns the residual stream as a pair (x, delta),
    x + delta being the stream: each add is left to the norm after it, which
    does it in the same pass (RMSNorm.add_norm; vLLM fuses its add and norm
    the same way). Trunk's final norm does the last add.

    ``rows`` (the last block of a step): only these rows of the output are
    wanted. The mixer still reads every row (its state must see each token),
    but its output projection, the residual and the MLP run on those rows
    alone: row-wise work, so the kept rows are what they would have been."""

    def __init__(self, norm_name: str, norm: nn.Module, mixer_name: str, mixer: MixerLayer,
                 mlp_norm_name: str | None = None, mlp_norm: nn.Module | None = None,
                 mlp_name: str | None = None, mlp: nn.Module | None = None, residual_fp32: bool = False):
        super().__init__()
        self.names = (norm_name, mixer_name, mlp_norm_name, mlp_name)
        setattr(self, norm_name, norm)
        setattr(self, mixer_name, mixer)
        if mlp is not None:
            setattr(self, mlp_norm_name, mlp_norm)
            setattr(self, mlp_name, mlp)
        self.has_mlp = mlp is not None
        self.residual_fp32 = residual_fp32

    @property
    def mixer_layer(self) -> MixerLayer:
        return getattr(self, self.names[1])

    def forward(self, x, delta, positions, step, rows=None):
        norm_name, mixer_name, mlp_norm_name, mlp_name = self.names
        # The submodules straight from the registry dict: getattr(self, name) on a module is
        # nn.Module.__getattr__, a Python call (~0.9 us; ~100 a decode step over a model's forwards).
        modules = self._modules
        # residual_fp32 (Mamba): the residual stream stays float32 between blocks
        h, x = modules[norm_name].add_norm(x, delta, self.residual_fp32)
        out = modules[mixer_name](h, positions, step, rows)
        if rows is not None:
            x = x[rows]
        if not self.has_mlp:
            return x, out
        h, x = modules[mlp_norm_name].add_norm(x, out, self.residual_fp32)
        return x, modules[mlp_name](h)


class Trunk(nn.Module):
    def __init__(self, embed_name: str, embed: nn.Embedding, blocks: list[Block], norm_name: str, norm: nn.Module):
        super().__init__()
        self.embed_name, self.norm_name = embed_name, norm_name
        setattr(self, embed_name, embed)
        self.layers = nn.ModuleList(blocks)
        setattr(self, norm_name, norm)

    def forward(self, input_ids, positions, step, rows=None):
        modules = self._modules  # see Block.forward
        blocks = modules["layers"]
        x, delta = modules[self.embed_name](input_ids), None
        last = len(blocks) - 1
        for i, block in enumerate(blocks):
            x, delta = block(x, delta, positions, step, rows if i == last else None)
        fp32 = last >= 0 and blocks[last].residual_fp32
        return modules[self.norm_name].add_norm(x, delta, fp32)[0]


@dataclass
class ModelInfo:
    """What the engine needs to know about a model besides its layers."""

    model_type: str
    vocab_size: int
    hidden_size: int
    max_positions: int | None  # None: no positional limit (state-space models)
    eos_token_ids: tuple[int, ...] = ()
    config: dict = field(default_factory=dict)


class CausalLM(nn.Module):
    def __init__(self, info: ModelInfo, trunk_name: str, trunk: Trunk, tie_embeddings: bool):
        super().__init__()
        self.info = info
        self.trunk_name = trunk_name
        setattr(self, trunk_name, trunk)
        self.lm_head = nn.Linear(info.hidden_size, info.vocab_size, bias=False)
        self.tie_embeddings = tie_embeddings
        if tie_embeddings:
            self.lm_head.weight = getattr(trunk, trunk.embed_name).weight

    @property
    def trunk(self) -> Trunk:
        return getattr(self, self.trunk_name)

    def mixers(self) -> list[MixerLayer]:
        return [block.mixer_layer for block in self.trunk.layers]

    def layer_decls(self) -> list[tuple[str, str, object]]:
        """(name, kind, spec) of every mixer: what the registry plans."""
        return [(m.layer_name, m.kind, m.spec) for m in self.mixers()]

    def table_layout(self, device: torch.device | str, dtype: torch.dtype):
        """(state-dict name, layout) of the tied table when, on this device and
        dtype, finalize() re-lays it (linear.table_layout), else None: the
        loader then reads it straight into that layout."""
        layout = table_layout(device, dtype) if self.tie_embeddings else None
        return None if layout is None else (f"{self.trunk_name}.{self.trunk.embed_name}.weight", layout)

    def finalize(self, table: torch.Tensor | None = None) -> None:
        """Once the weights are loaded and on their device: let every module
        precompute what each step would redo (fused projections, weights
        records), then re-lay the projections (see linear.py). ``table``: the
        tied table as the loader laid it (``table_layout``), if it did."""
        # Hold only the modules that finalize, not their projections: each
        # original is then freed as soon as its module drops it.
        for module in [m for m in self.modules() if m is not self and callable(getattr(m, "finalize", None))]:
            module.finalize()
        trunk = self.trunk
        embed = trunk.get_submodule(trunk.embed_name)
        layout = self.table_layout(embed.weight.device, embed.weight.dtype)
        if layout is not None:
            if table is None:
                table = layout[1].relay(embed.weight.detach())
            vocab, hidden = self.info.vocab_size, self.info.hidden_size
            if layout[1] is panels.PanelLayout:
                del embed
                setattr(trunk, trunk.embed_name, panels.PanelEmbedding(table, vocab))
                self.lm_head = panels.PanelLinear(hidden, vocab, table, None)
            else:
                embed.weight = nn.Parameter(table, requires_grad=False)
                self.lm_head.weight = embed.weight
        pack_linears(self)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, step,
                rows: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states after the final norm: [T, hidden], or [len(rows), hidden]
        at just the given rows (a prefill wants only each prompt's last row:
        the last block then skips the rest, see Block)."""
        return self.trunk(input_ids, positions, step, rows)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
