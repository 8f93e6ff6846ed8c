"""The model's dense ops: modules that name their kind and spec for the plan,
hold the checkpoint's tensors until the engine binds the chosen backend's
impl, then call it. One entry point per op; what runs is the plan's choice.

The engine hands the op's weights to its impl once (``Op.load_into``:
``impl.load``), then binds it (``Op.bind``), which drops the module's own
parameters: the impl's copy, as it is or re-laid, is then the only one
(two impls' copies, in an op split by phase). Binding also points the op's ``forward``
at the impl's, and calling an op skips ``nn.Module``'s call machinery (ops
take no hooks): a decode step makes a few calls per block, and this is the
one place their Python cost is cut (``benchmarks/README.md``, issue 16)."""

from __future__ import annotations

import math

import torch
from torch import nn

from mixboard import (
    ArgmaxSpec, EmbeddingSpec, EmbeddingWeights, LinearSpec, LinearWeights, RMSNormSpec, RMSNormWeights, RotarySpec,
)
from mixboard.kinds import rotary_scaling


class Op(nn.Module):
    """One dense op: ``layer_name``, ``kind`` and ``spec`` for the plan; ``impl`` once bound."""

    kind: str
    impl = None

    def __init__(self, layer_name: str, spec):
        super().__init__()
        self.layer_name, self.spec = layer_name, spec

    def weights(self):
        """The weights record ``impl.load`` takes, from the loaded parameters (None: the op has none)."""
        return None

    def load_into(self, impl) -> None:
        """Hand the op's weights to ``impl`` (``impl.load``); ``bind`` then drops the op's own."""
        record = self.weights()
        if record is not None:
            impl.load(record)

    def bind(self, impl) -> None:
        """Run ``impl`` from now on (its weights already loaded, ``load_into``)."""
        self.release()
        self.impl = impl
        self.forward = impl.forward  # an instance attribute: the subclass's forward only documents the call

    def __call__(self, *args):
        return self.forward(*args)

    def release(self) -> None:
        for name, _ in list(self.named_parameters(recurse=False)):
            delattr(self, name)


def _initialized(weight: nn.Parameter, bias: nn.Parameter | None) -> None:
    """nn.Linear's initial values, drawn the same way (a model made without a checkpoint, the demo)."""
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        bound = 1 / math.sqrt(weight.shape[1])
        nn.init.uniform_(bias, -bound, bound)


class Params(nn.Module):
    """A projection's tensors under the checkpoint's names (``weight``, ``bias``),
    read by the fused op that runs them (``FusedLinear``)."""

    def __init__(self, in_features: int, out_features: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        _initialized(self.weight, self.bias)

    def release(self) -> None:
        self.weight = self.bias = None


class Linear(Op):
    kind = "linear"

    def __init__(self, layer_name: str, in_features: int, out_features: int, dtype: str, bias: bool = False):
        super().__init__(layer_name, LinearSpec(in_features=in_features, out_features=out_features, bias=bias,
                                                dtype=dtype))
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        _initialized(self.weight, self.bias)

    def weights(self):
        return LinearWeights(self.weight.detach(), None if self.bias is None else self.bias.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.impl.forward(x)


class FusedLinear(Op):
    """Several projections of one input as one product (q, k and v; gate and up,
    ``gated``: SwiGLU's gate applied). The parts stay their parent's modules,
    under the checkpoint's names; this op reads them once, when bound."""

    kind = "linear"

    def __init__(self, layer_name: str, parts: tuple[Params, ...], dtype: str, gated: bool = False):
        rows = sum(p.weight.shape[0] for p in parts)
        bias = parts[0].bias is not None
        super().__init__(layer_name, LinearSpec(in_features=parts[0].weight.shape[1],
                                                out_features=rows // 2 if gated else rows, bias=bias,
                                                gated=gated, dtype=dtype))
        self.parts = parts  # a tuple: not registered, so the parameters load under their parent's names

    def weights(self):
        weight = torch.cat([p.weight.detach() for p in self.parts])
        bias = torch.cat([p.bias.detach() for p in self.parts]) if self.spec.bias else None
        return LinearWeights(weight, bias)

    def release(self) -> None:
        for part in self.parts:
            part.release()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.impl.forward(x)


class RMSNorm(Op):
    kind = "rms_norm"

    def __init__(self, layer_name: str, hidden: int, eps: float, dtype: str, residual_fp32: bool = False):
        super().__init__(layer_name, RMSNormSpec(hidden_size=hidden, eps=eps, residual_fp32=residual_fp32,
                                                 dtype=dtype))
        self.weight = nn.Parameter(torch.ones(hidden))

    def weights(self):
        return RMSNormWeights(self.weight.detach())

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None):
        """(norm(x + residual), x + residual): x a branch's output, ``residual`` the stream, handed
        over (the impl may write the sum into it); None: no stream yet, (norm(x), x)."""
        return self.impl.forward(x, residual)


class ZeroCentredRMSNorm(RMSNorm):
    """An RMSNorm whose checkpoint stores weight - 1: it scales by (1 + weight) (Qwen3-Next's, initialised
    at zeros). The 1 is folded in here, in the weights the impl loads, so the rms_norm kind runs it as is."""

    def weights(self):
        w = self.weight.detach()
        return RMSNormWeights((1.0 + w.float()).to(w.dtype))


class Rotary(Op):
    """One per model: every attention layer holds the same one."""

    kind = "rotary"

    def __init__(self, layer_name: str, head_size: int, theta: float, dtype: str, rotary_dim: int | None = None,
                 scaling: dict | None = None):
        super().__init__(layer_name, RotarySpec(head_size=head_size, rotary_dim=rotary_dim, theta=theta,
                                                scaling=rotary_scaling(scaling), dtype=dtype))

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor):
        return self.impl.forward(positions, q, k)


class Embedding(Op):
    """The token table; with ``tied``, the LM head too (``logits``)."""

    kind = "embedding"

    def __init__(self, layer_name: str, vocab: int, hidden: int, dtype: str, tied: bool):
        super().__init__(layer_name, EmbeddingSpec(num_embeddings=vocab, embedding_dim=hidden, tied=tied, dtype=dtype))
        self.weight = nn.Parameter(torch.empty(vocab, hidden))
        nn.init.normal_(self.weight)  # nn.Embedding's initial values

    def weights(self):
        return EmbeddingWeights(self.weight.detach())

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.impl.forward(ids)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.impl.logits(hidden)


class Argmax(Op):
    """Greedy sampling's op: the index of each row's largest logit."""

    kind = "argmax"

    def __init__(self, layer_name: str, vocab: int, dtype: str):
        super().__init__(layer_name, ArgmaxSpec(vocab_size=vocab, dtype=dtype))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return self.impl.forward(logits)
