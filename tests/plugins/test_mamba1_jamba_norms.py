"""The kind's dt/B/C norms (Mamba1Spec.dt_bc_norms) against transformers'
JambaMambaMixer with the same weights: its in_proj and out_proj run around
mamba1_torch and around the oracle; both must match the module's own output
(float32, max abs error 1e-5). Without the norms the result is far off, so
the test sees whether they are applied at all."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
from transformers import JambaConfig  # noqa: E402
from transformers.models.jamba.modeling_jamba import JambaMambaMixer  # noqa: E402

from mixboard import CommonBatchMetadata, Mamba1Spec, Mamba1Weights, simulate  # noqa: E402
from mixboard.kinds.mamba1 import mamba1_state  # noqa: E402
from mixboard.ops.checks import build_impl  # noqa: E402
from mixboard.testing import Mamba1Oracle, allocate_state  # noqa: E402
from mixboard_mamba1.torch_backend import Mamba1Torch  # noqa: E402

HIDDEN = 16


@pytest.fixture(scope="module")
def mixer():
    torch.manual_seed(0)
    config = JambaConfig(hidden_size=HIDDEN, mamba_d_state=6, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=4,
                         num_hidden_layers=1, rms_norm_eps=1e-5, use_mamba_kernels=False)
    module = JambaMambaMixer(config, layer_idx=0).eval()
    with torch.no_grad():  # move the parameters off their tidy initial values
        module.A_log.add_(torch.randn_like(module.A_log) * 0.5)
        module.dt_proj.bias.add_(torch.randn_like(module.dt_proj.bias))
        for norm in (module.dt_layernorm, module.b_layernorm, module.c_layernorm):
            norm.weight.uniform_(0.5, 1.5)
        module.in_proj.weight.mul_(2.0)
        module.out_proj.weight.mul_(4.0)
    return module


def run(m: JambaMambaMixer, impl, hidden: torch.Tensor, norms: bool) -> torch.Tensor:
    spec = Mamba1Spec(d_inner=m.intermediate_size, d_state=m.ssm_state_size, d_conv=m.conv_kernel_size,
                      dt_rank=m.time_step_rank, conv_bias=m.use_conv_bias, dt_bc_norms=norms,
                      norm_eps=m.dt_layernorm.variance_epsilon)
    weights = Mamba1Weights(
        conv_weight=m.conv1d.weight[:, 0, :], conv_bias=m.conv1d.bias, x_proj_weight=m.x_proj.weight,
        dt_proj_weight=m.dt_proj.weight, dt_proj_bias=m.dt_proj.bias, A=-torch.exp(m.A_log.float()), D=m.D,
        **(dict(dt_norm_weight=m.dt_layernorm.weight, b_norm_weight=m.b_layernorm.weight,
                c_norm_weight=m.c_layernorm.weight) if norms else {}))
    op = impl(spec)
    meta = CommonBatchMetadata.build([len(hidden)], [0], [0], [[]], block_size=16)
    if not isinstance(op, Mamba1Oracle):
        meta = Mamba1Torch.builder(spec, simulate("cpu"))(meta)
    x, z = m.in_proj(hidden).chunk(2, dim=-1)
    return m.out_proj(op.forward(x, z, weights, allocate_state(mamba1_state(spec), 2), meta))


IMPLS = {"mamba1_torch": lambda spec: build_impl(Mamba1Torch, spec, simulate("cpu"), "model.layers.0.mamba"),
         "oracle": Mamba1Oracle}


@pytest.mark.parametrize("impl", IMPLS)
@torch.no_grad()
def test_norms_match_jamba_mixer(mixer, impl):
    torch.manual_seed(1)
    hidden = torch.randn(23, HIDDEN)
    expected = mixer(hidden.unsqueeze(0))[0]
    torch.testing.assert_close(run(mixer, IMPLS[impl], hidden, norms=True), expected, atol=1e-5, rtol=0)
    assert (run(mixer, IMPLS[impl], hidden, norms=False) - expected).abs().max() > 1e-2
