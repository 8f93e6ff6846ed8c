"""mamba1_torch against Hugging Face transformers' MambaMixer with the same
weights: its in_proj and out_proj run around our backend; the result must
match the module's own output (float32, max abs error 1e-5)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
from transformers import DynamicCache, MambaConfig  # noqa: E402
from transformers.models.mamba.modeling_mamba import MambaMixer  # noqa: E402

from mixboard import CommonBatchMetadata, Mamba1Spec, Mamba1Weights, simulate  # noqa: E402
from mixboard.kinds.mamba1 import mamba1_state  # noqa: E402
from mixboard.ops.checks import build_impl  # noqa: E402
from mixboard.testing import allocate_state  # noqa: E402
from mixboard_mamba1.torch_backend import Mamba1Torch  # noqa: E402

CPU = simulate("cpu")
HIDDEN = 16


@pytest.fixture(scope="module")
def mixer():
    torch.manual_seed(0)
    config = MambaConfig(hidden_size=HIDDEN, state_size=6, conv_kernel=4, expand=2, time_step_rank=4,
                         num_hidden_layers=1, use_conv_bias=True, use_bias=False)
    module = MambaMixer(config, layer_idx=0).eval()
    with torch.no_grad():  # move the parameters off their tidy initial values
        module.A_log.add_(torch.randn_like(module.A_log) * 0.5)
        module.D.add_(torch.randn_like(module.D) * 0.5)
        module.dt_proj.bias.add_(torch.randn_like(module.dt_proj.bias))
        module.conv1d.bias.normal_(0, 0.2)
        module.in_proj.weight.mul_(2.0)  # outputs of order 1, so that 1e-5 is a tight bound
        module.out_proj.weight.mul_(4.0)
    return module


def spec_of(m: MambaMixer) -> Mamba1Spec:
    return Mamba1Spec(d_inner=m.intermediate_size, d_state=m.ssm_state_size, d_conv=m.conv_kernel_size,
                      dt_rank=m.time_step_rank, conv_bias=m.use_conv_bias)


def weights_of(m: MambaMixer) -> Mamba1Weights:
    return Mamba1Weights(
        conv_weight=m.conv1d.weight[:, 0, :], conv_bias=m.conv1d.bias, x_proj_weight=m.x_proj.weight,
        dt_proj_weight=m.dt_proj.weight, dt_proj_bias=m.dt_proj.bias, A=-torch.exp(m.A_log.float()), D=m.D,
    )


class Ours:
    """MambaMixer's projections around mamba1_torch, over packed ragged batches."""

    def __init__(self, m: MambaMixer, slots: int = 12):
        self.m, self.spec = m, spec_of(m)
        self.impl = build_impl(Mamba1Torch, self.spec, CPU, "backbone.layers.0.mixer")
        self.builder = Mamba1Torch.builder(self.spec, CPU)
        self.weights = weights_of(m)
        self.state = allocate_state(mamba1_state(self.spec), slots)

    def __call__(self, hidden: torch.Tensor, query_lens, context_lens, slots) -> torch.Tensor:
        meta = CommonBatchMetadata.build(query_lens, context_lens, slots, [[] for _ in slots], block_size=16)
        x, z = self.m.in_proj(hidden).chunk(2, dim=-1)
        y = self.impl.forward(x, z, self.weights, self.state, self.builder(meta))
        return self.m.out_proj(y)


@pytest.mark.parametrize("lengths", [[9], [1, 2, 3], [5, 1, 17, 64, 2, 33, 8, 40]])
@torch.no_grad()
def test_ragged_prefills_match_the_module(mixer, lengths):
    torch.manual_seed(len(lengths))
    seqs = [torch.randn(n, HIDDEN) for n in lengths]
    got = Ours(mixer)(torch.cat(seqs), lengths, [0] * len(lengths), list(range(len(lengths))))
    start = 0
    for seq in seqs:
        expected = mixer(seq.unsqueeze(0))[0]
        torch.testing.assert_close(got[start:start + len(seq)], expected, atol=1e-5, rtol=0)
        start += len(seq)


@torch.no_grad()
def test_decode_steps_match_the_module_with_its_cache(mixer):
    """transformers' own decode path (cache, one token per call) against our decodes, batched."""
    torch.manual_seed(7)
    batch, prompt, new = 3, 21, 6
    hidden = torch.randn(batch, prompt + new, HIDDEN)
    cache = DynamicCache(config=mixer.config)
    expected = [mixer(hidden[:, :prompt], cache=cache)]
    expected += [mixer(hidden[:, t:t + 1], cache=cache) for t in range(prompt, prompt + new)]
    expected = torch.cat(expected, dim=1)

    ours = Ours(mixer)
    slots = [4, 0, 9]
    got = [ours(hidden[:, :prompt].reshape(-1, HIDDEN), [prompt] * batch, [0] * batch, slots).view(batch, prompt, -1)]
    for t in range(prompt, prompt + new):
        got.append(ours(hidden[:, t], [1] * batch, [t] * batch, slots).view(batch, 1, -1))
    torch.testing.assert_close(torch.cat(got, dim=1), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.state["ssm"][slots], cache.get_recurrent_state(0), atol=1e-5, rtol=0)


@torch.no_grad()
def test_mixed_decodes_and_chunked_prefills_match_the_module(mixer):
    """One sequence decodes while another's prompt arrives in chunks; each equals one full forward."""
    torch.manual_seed(3)
    a, b = torch.randn(30, HIDDEN), torch.randn(50, HIDDEN)
    ours = Ours(mixer)
    out_a = [ours(a[:26], [26], [0], [5])]
    out_b = []
    for done, n in ((0, 20), (20, 18), (38, 12)):
        t = len(torch.cat(out_a))
        y = ours(torch.cat([a[t:t + 1], b[done:done + n]]), [1, n], [t, done], [5, 2])
        out_a.append(y[:1])
        out_b.append(y[1:])
    out_a.append(ours(a[29:30], [1], [29], [5]))
    torch.testing.assert_close(torch.cat(out_a), mixer(a.unsqueeze(0))[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat(out_b), mixer(b.unsqueeze(0))[0], atol=1e-5, rtol=0)
