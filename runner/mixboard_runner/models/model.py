"""A causal LM assembled from blocks: embedding, pre-norm residual blocks
(mixer, optional MLP), final norm, LM head, argmax.

Modules carry their role's name (``norm``, ``mixer``, ``mlp``); a module's
``renames`` maps its children's roles to the checkpoint's names
(``checkpoint_names``), so Hugging Face state dicts load as they are."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .ops import Argmax, Embedding, Linear


class Block(nn.Module):
    """x = x + mixer(norm(x)); then, with an MLP, x = x + mlp(mlp_norm(x)).

    The residual stream travels beside the branch output, and each norm adds
    them before normalizing (the ``rms_norm`` kind). ``rows`` (the last block
    of a step): only these rows are wanted; the mixer still reads every row
    (its state must see each token), what follows runs on those alone.
    ``names``: the checkpoint's names of (norm, mixer, mlp_norm, mlp)."""

    def __init__(self, names: tuple[str, ...], norm, mixer, mlp_norm=None, mlp=None):
        super().__init__()
        self.norm, self.mixer, self.mlp_norm, self.mlp = norm, mixer, mlp_norm, mlp
        self.renames = dict(zip(("norm", "mixer", "mlp_norm", "mlp"), names))

    def forward(self, x, residual, positions, step, rows=None):
        h, residual = self.norm(x, residual)
        x = self.mixer(h, positions, step)
        if rows is not None:
            x, residual = x[rows], residual[rows]
        if self.mlp is not None:
            h, residual = self.mlp_norm(x, residual)
            x = self.mlp(h)
        return x, residual


class Trunk(nn.Module):
    """``names``: the checkpoint's names of (embed, norm)."""

    def __init__(self, names: tuple[str, str], embed: Embedding, blocks: list[Block], norm):
        super().__init__()
        self.embed, self.layers, self.norm = embed, nn.ModuleList(blocks), norm
        self.renames = {"embed": names[0], "norm": names[1]}

    def forward(self, input_ids, positions, step, rows=None):
        x, residual = self.embed(input_ids), None
        last = len(self.layers) - 1
        for i, block in enumerate(self.layers):
            x, residual = block(x, residual, positions, step, rows if i == last else None)
        return self.norm(x, residual)[0]


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
    # checkpoint tensors the model does not run and the loader reads past (Qwen3-Next's multi-token
    # prediction head, "mtp."), by name prefix; any other tensor it does not use is refused
    unused_prefixes: tuple[str, ...] = ()

    def __init__(self, info: ModelInfo, trunk_name: str, trunk: Trunk, tie_embeddings: bool, dtype: str):
        super().__init__()
        self.info, self.trunk, self.tie_embeddings = info, trunk, tie_embeddings
        self.lm_head = None if tie_embeddings else Linear("lm_head", info.hidden_size, info.vocab_size, dtype)
        self.argmax = Argmax("argmax", info.vocab_size, dtype)
        self.renames = {"trunk": trunk_name}

    def layers(self) -> dict:
        """Layer name -> module, for every mixer and op (each once, in model order)."""
        return {m.layer_name: m for m in self.modules() if hasattr(m, "layer_name")}

    def layer_decls(self) -> list[tuple[str, str, object]]:
        """(name, kind, spec) of every mixer and op: what the registry plans."""
        return [(name, m.kind, m.spec) for name, m in self.layers().items()]

    def finalize(self) -> None:
        """Once the weights are loaded: let every mixer precompute its weights record."""
        for module in list(self.modules()):
            if module is not self and callable(getattr(module, "finalize", None)):
                module.finalize()

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, step,
                rows: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states after the final norm: [T, hidden], or [len(rows), hidden]
        at just the given rows (a prefill wants only each prompt's last row)."""
        return self.trunk(input_ids, positions, step, rows)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.trunk.embed.logits(hidden) if self.lm_head is None else self.lm_head(hidden)


def checkpoint_names(model: nn.Module) -> dict[str, str]:
    """state_dict key -> the checkpoint's name for it (each module's ``renames`` applied)."""
    names = {}

    def walk(module: nn.Module, path: str, ckpt: str) -> None:
        for name, param in module.named_parameters(recurse=False):
            names[path + name] = ckpt + name
        renames = module.__dict__.get("renames", {})  # a plain attribute, if the module has one
        for name, child in module.named_children():
            rename = renames.get(name, name)  # "": the child's tensors sit at its parent's level
            walk(child, f"{path}{name}.", f"{ckpt}{rename}." if rename else ckpt)

    walk(model, "", "")
    return names
