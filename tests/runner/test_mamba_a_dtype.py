"""The runner's Mamba layers hand their backends A in float32 whatever the layer's dtype, as
transformers computes it (``-exp(A_log.float())``); rounded to a bfloat16 layer's dtype it moved by up
to 2**-9 relative, compounding over every step of the scan."""

from __future__ import annotations

import pytest
import torch

from mixboard import Mamba1Spec, Mamba2Spec
from mixboard_runner.models.mixers import Mamba1Layer, Mamba2Layer

LAYERS = {
    "mamba1": lambda: Mamba1Layer("model.layers.0.mixer", 32, Mamba1Spec(d_inner=64, d_state=8, d_conv=4, dt_rank=4,
                                                                           dtype="bfloat16")),
    "mamba2": lambda: Mamba2Layer("model.layers.0.mixer", 32, Mamba2Spec(dtype="bfloat16")),
}


@pytest.mark.parametrize("kind", LAYERS)
def test_a_stays_float32_in_a_bfloat16_layer(kind):
    layer = LAYERS[kind]().to(torch.bfloat16)
    with torch.no_grad():
        layer.A_log.copy_(torch.linspace(-3, 3, layer.A_log.numel()).view_as(layer.A_log))
    layer.finalize()
    want = -torch.exp(layer.A_log.detach().float())
    assert layer.weights.A.dtype == torch.float32
    assert torch.equal(layer.weights.A, want)
    assert not torch.equal(want.bfloat16().float(), want)  # the values chosen do round in bfloat16
