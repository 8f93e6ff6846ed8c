"""Kind ``moe``: a mixture of experts, each token routed through its top-k experts.

The routed part of a sparse MLP block (Mixtral, Jamba, GraniteMoeHybrid,
Qwen3-Next, Nemotron-H): the router, the choice of experts, the experts'
products and the weighted sum. A shared expert, a latent projection and
the residual add stay the model's (a ``linear`` beside this op).

The expert weights are laid as Hugging Face transformers keeps them (one
3-D tensor per projection, ``[experts, out, in]``: ``gate_up_proj`` and
``down_proj``, Nemotron-H's ``up_proj``), so a runner hands them over as
loaded.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from .base import Kind, MixerSpec, Record, require, spec_class
from .op import OpImpl, no_state

if TYPE_CHECKING:
    from torch import Tensor

ACTIVATIONS = ("silu", "relu2")
GATINGS = ("softmax_topk", "topk_softmax", "sigmoid_topk")


@spec_class
class MoESpec(MixerSpec):
    """hidden_size: a token's width (1024). num_experts (8), top_k: experts
    per token (2). intermediate_size: an expert's inner width (1024).
    activation: "silu" (gated SwiGLU, silu(gate) * up: Mixtral, Jamba,
    Granite, Qwen) or "relu2" (relu(up) ** 2, no gate: Nemotron-H).
    gating: how router logits become weights: "softmax_topk" (softmax over
    every expert, then the top k: Mixtral, Jamba, Qwen), "topk_softmax" (the
    top k logits, then a softmax over them: Granite), "sigmoid_topk" (a
    sigmoid per expert, then the top k: Nemotron-H).
    normalize_topk: the chosen weights divided by their sum (False).
    routed_scaling: a factor on every chosen weight (1.0).
    router_bias: a bias added to the router logits (False).
    selection_bias: a bias added to the scores for choosing only, not to
    the weights (Nemotron-H's e_score_correction_bias; False).
    logits_input: the caller's own router makes the logits and hands them
    to ``forward(x, logits)``, the weights then hold no router (an engine
    that keeps its gate outside the experts: vLLM's FusedMoE); everything
    after the logits is the kind's (False)."""

    hidden_size: int = 1024
    num_experts: int = 8
    top_k: int = 2
    intermediate_size: int = 1024
    activation: str = "silu"
    gating: str = "softmax_topk"
    normalize_topk: bool = False
    routed_scaling: float = 1.0
    router_bias: bool = False
    selection_bias: bool = False
    logits_input: bool = False

    def validate(self) -> None:
        require(self.hidden_size > 0 and self.intermediate_size > 0,
                "hidden_size and intermediate_size must be positive")
        require(self.num_experts > 0, "num_experts must be positive")
        require(0 < self.top_k <= self.num_experts,
                f"top_k must be between 1 and num_experts ({self.num_experts}), not {self.top_k}")
        require(self.activation in ACTIVATIONS,
                f"activation must be one of {', '.join(ACTIVATIONS)}, not {self.activation!r}")
        require(self.gating in GATINGS, f"gating must be one of {', '.join(GATINGS)}, not {self.gating!r}")
        require(self.routed_scaling > 0, "routed_scaling must be positive")
        require(not (self.logits_input and self.router_bias),
                "router_bias is the router's: with logits_input the caller's router adds it")

    @property
    def gated(self) -> bool:
        """Whether an expert's first product holds a gate's rows before up's (silu)."""
        return self.activation == "silu"

    @property
    def up_rows(self) -> int:
        """Rows of an expert's first product: 2 x intermediate_size gated, else intermediate_size."""
        return 2 * self.intermediate_size if self.gated else self.intermediate_size


class MoEWeights(Record):
    """router: [num_experts, hidden_size] (None with logits_input);
    router_bias, selection_bias: [num_experts] or None; gate_up: [num_experts, rows, hidden_size], rows
    2 x intermediate_size for silu (the gate's rows, then up's) or
    intermediate_size for relu2 (up's); down: [num_experts, hidden_size,
    intermediate_size]."""

    __slots__ = ("router", "router_bias", "selection_bias", "gate_up", "down")


class MoEImpl(OpImpl):
    """The impl interface of kind ``moe``: ``load(MoEWeights)``, then ``forward(x, logits)``.

    weights: router [num_experts, hidden_size] (None with logits_input); router_bias [num_experts]
    or None; selection_bias [num_experts] or None; gate_up [num_experts,
    rows, hidden_size], rows 2 x intermediate_size for silu (the gate's
    rows, then up's: transformers' gate_up_proj) or intermediate_size for
    relu2 (Nemotron-H's up_proj); down [num_experts, hidden_size,
    intermediate_size] (down_proj).
    x: [T, hidden_size].
    logits: None, or with logits_input the caller's router logits
    [T, num_experts] (float32 or the layer's dtype).
    Returns [T, hidden_size] in the layer's dtype. Per token:

        logits = router @ x + router_bias, or as given     (float32 at least)
        scores = softmax(logits)    softmax_topk
                 logits             topk_softmax
                 sigmoid(logits)    sigmoid_topk
        chosen = the top_k experts by scores + selection_bias, in order;
                 on equal values the lower expert index first (torch.topk's)
        w      = scores[chosen], or softmax(logits[chosen]) for topk_softmax
        w      = w / sum(w)  with normalize_topk;  then w = w * routed_scaling
        y      = sum over j of w[j] * expert(chosen[j], x)
        expert(e, x) = down[e] @ (silu(g) * u),  g, u = split(gate_up[e] @ x)   silu
                       down[e] @ relu(gate_up[e] @ x) ** 2                         relu2

    An expert no token chose costs nothing; one every token chose, one product.
    The rules every dense kind shares: ``help(mixboard.kinds.OpImpl)``.
    The oracle, ``mixboard.testing.MoEOracle``, is the definition.
    """

    @abstractmethod
    def load(self, weights: MoEWeights) -> None:
        """Keep the router and the experts' weights (as they are, or re-laid)."""

    @abstractmethod
    def forward(self, x: "Tensor", logits: "Tensor | None" = None) -> "Tensor":
        """[T, hidden_size] (and [T, num_experts] with logits_input) -> [T, hidden_size]."""


MOE = Kind(
    name="moe",
    spec=MoESpec,
    impl=MoEImpl,
    state_spec=no_state,
    description="a mixture of experts: router, top-k choice, the chosen experts' products, their weighted sum",
    install_hint="moe_torch ships with mixboard itself; reinstall mixboard",
    conformance="mixboard.testing.conformance.op_kinds:MOE",
    row_inputs={"forward": 2},
)
