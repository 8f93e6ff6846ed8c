"""What the dense kinds share: stateless ops that a layer runs on its rows.

The mixer kinds (attention, mamba1, mamba2, short_conv) keep per-sequence
state and get the step's metadata. The dense kinds (linear, rms_norm,
rotary, embedding, argmax, moe) keep none: each op reads its inputs, its own
weights, and nothing else. Their backends are ordinary ``Backend``
classes, chosen per layer by the same registry, forced by the same rules.
"""

from __future__ import annotations

from abc import ABC

from ..state import StateSpec

# The state of an op that keeps none: a runner allocates nothing for it.
NO_STATE = StateSpec.none()


def no_state(spec) -> StateSpec:
    return NO_STATE


class OpImpl(ABC):
    """Base of every dense kind's impl interface: the rules they share.

    Lifecycle. ``make_impl(spec, env)`` is called once per layer (the
    caller then sets ``impl.layer_name``). A kind with weights then gets
    ``impl.load(weights)`` once, before any forward: the kind's weights
    record, every tensor in the layer's dtype on the layer's device. The
    impl keeps what it needs of them, as they are or re-laid once (packed
    panels, another storage order): that is where a backend prepares
    weights, never in ``forward``. The caller drops its own references
    after ``load`` (so a re-laid copy need not double the memory); neither
    it nor the impl writes the tensors handed over (they may be a mapped
    checkpoint's). Then ``forward`` runs any number of
    times, under ``torch.inference_mode()``; there is no builder, no state
    and no step metadata.

    Inputs are ``[T, ...]``, T >= 1 (a runner never runs an op on no
    rows), on the layer's device, in the layer's dtype unless the kind says
    otherwise; the last dimension has stride 1, other strides are free
    (views into a fused product's output). ``forward`` must not change its
    inputs, except where its kind hands one over to be written (rms_norm's
    ``residual``, rotary's ``q`` and ``k``), and returns tensors of its own:
    sharing memory with no weight, and with no input but one its kind
    hands over or names as a result (rms_norm's ``s`` is x when there is
    no residual yet). The kind's oracle in ``mixboard.testing``
    defines its numbers; ``mixboard check BACKEND`` checks every rule.
    """

    layer_name: str = "(unnamed layer)"

    def load(self, weights) -> None:
        """Take the layer's weights (kinds with weights override this)."""
