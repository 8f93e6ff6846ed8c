"""A causal LM assembled from blocks: embedding, pre-norm residual blocks
(mixer, optional MLP), final norm, LM head. Module names are the
checkpoint's, given by the architecture, so Hugging Face state dicts load as
they are."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .linear import column_major, onednn_serves, pack_linears
from .mixers import MixerLayer


class Block(nn.Module):
    """x = x + mixer(norm(x)); then, if there is an MLP, x = x + mlp(mlp_norm(x))."""

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

    def forward(self, x, positions, step):
        norm_name, mixer_name, mlp_norm_name, mlp_name = self.names
        norm = getattr(self, norm_name)
        # residual_fp32 (Mamba): the residual stream stays float32 between blocks
        out = getattr(self, mixer_name)(norm(x.to(norm.weight.dtype)), positions, step)
        x = x.float() + out if self.residual_fp32 else x + out
        if self.has_mlp:
            x = x + getattr(self, mlp_name)(getattr(self, mlp_norm_name)(x))
        return x


class Trunk(nn.Module):
    def __init__(self, embed_name: str, embed: nn.Embedding, blocks: list[Block], norm_name: str, norm: nn.Module,
                 norm_first: bool = False):
        super().__init__()
        self.embed_name, self.norm_name = embed_name, norm_name
        setattr(self, embed_name, embed)
        self.layers = nn.ModuleList(blocks)
        setattr(self, norm_name, norm)

    def forward(self, input_ids, positions, step):
        x = getattr(self, self.embed_name)(input_ids)
        for block in self.layers:
            x = block(x, positions, step)
        norm = getattr(self, self.norm_name)
        return norm(x.to(norm.weight.dtype))


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

    def column_major_table(self, device: torch.device | str, dtype: torch.dtype) -> str | None:
        """The state-dict name of the tied table when, on this device and
        dtype, finalize() stores it transposed (linear.column_major), else None:
        the loader reads it straight into that layout."""
        if self.tie_embeddings and onednn_serves(device, dtype):
            return f"{self.trunk_name}.{self.trunk.embed_name}.weight"
        return None

    def finalize(self) -> None:
        """Once the weights are loaded and on their device: let every module
        precompute what each step would redo (fused projections, weights
        records), then pack the projections (see linear.py)."""
        # Hold only the modules that finalize, not their projections: each
        # original is then freed as soon as its module drops it.
        for module in [m for m in self.modules() if m is not self and callable(getattr(m, "finalize", None))]:
            module.finalize()
        embed = self.trunk.get_submodule(self.trunk.embed_name)
        if self.column_major_table(embed.weight.device, embed.weight.dtype):
            embed.weight = nn.Parameter(column_major(embed.weight.detach()), requires_grad=False)
            self.lm_head.weight = embed.weight
        pack_linears(self)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, step) -> torch.Tensor:
        """Hidden states after the final norm, [T, hidden]."""
        return self.trunk(input_ids, positions, step)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
