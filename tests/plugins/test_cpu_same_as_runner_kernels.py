"""While the runner's own copy of these kernels exists (``mixboard_runner.
_cpu_kernels``, before the runner switched to mixboard-cpu's backends):
mixboard-cpu's backends give the same bits as the runner's kernels called as
the runner called them, on every instruction set. A migration check: it skips
once the runner's copy is gone, and goes with it."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from mixboard import (ArgmaxSpec, EmbeddingSpec, EmbeddingWeights, LinearSpec, LinearWeights, RMSNormSpec,
                      RMSNormWeights, RotarySpec)
from mixboard.ops.rope import cos_sin
from mixboard_cpu.compiled import PANELS, ROWS, kernel_missing
from cpu_ops import loaded

OLD = "mixboard_runner._cpu_kernels"
pytestmark = pytest.mark.skipif(importlib.util.find_spec(OLD) is None or kernel_missing(PANELS) or kernel_missing(ROWS),
                                reason=f"{OLD} (the runner's old copy) or mixboard-cpu's kernels are not built")


@pytest.fixture(scope="module")
def old():
    import mixboard_runner._cpu_kernels as old

    return old


def _isas():
    if kernel_missing(PANELS):
        return ()
    from mixboard_cpu import _panels

    return _panels.supported()


@pytest.fixture(params=_isas())
def isa(request, old):
    from mixboard_cpu import _panels

    old.use_isa(request.param)
    _panels.use_isa(request.param)
    yield request.param
    old.use_isa("")
    _panels.use_isa("")


def old_product(old, x, panels, out, bias=None, gated=False):
    y = torch.empty(x.shape[0], out)
    (old.gated_linear if gated else old.linear)(x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), panels.data_ptr(),
                                                out, 0 if bias is None else bias.data_ptr(), y.data_ptr(), out)
    return y


@pytest.mark.parametrize("out_features, in_features", [(64, 48), (37, 97), (1536, 512), (24, 1024)])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("gated", [False, True])
def test_products_are_bit_for_bit_the_runners(old, isa, out_features, in_features, bias, gated):
    from mixboard_cpu.linear_backend import LinearCpu

    spec = LinearSpec(in_features=in_features, out_features=out_features, bias=bias, gated=gated)
    g = torch.Generator().manual_seed(out_features)
    w = LinearWeights(weight=torch.randn(spec.weight_rows, in_features, generator=g),
                      bias=torch.randn(spec.weight_rows, generator=g) if bias else None)
    impl = loaded(LinearCpu, spec, w)
    for rows in (1, 7, 16, 20, 37, 65, 130):
        x = torch.randn(rows, 3 * in_features)[:, in_features:2 * in_features]  # strided rows too
        new = impl.forward(x)
        assert torch.equal(new.view(torch.int32), old_product(old, x, impl.panels, out_features, impl.bias, gated)
                           .view(torch.int32)), rows


def test_the_tied_lm_head_and_lookups_are_the_runners(old):
    from mixboard_cpu.embedding_backend import EmbeddingCpu

    table = torch.randn(1000, 64)
    impl = loaded(EmbeddingCpu, EmbeddingSpec(num_embeddings=1000, embedding_dim=64, tied=True),
                  EmbeddingWeights(weight=table))
    for rows in (1, 16, 37):
        h = torch.randn(rows, 64)
        assert torch.equal(impl.logits(h).view(torch.int32), old_product(old, h, impl.panels, 1000).view(torch.int32))
    ids = torch.tensor([0, 999, 17, 17])
    assert torch.equal(impl.forward(ids), table[ids])


@pytest.mark.parametrize("shape", [(1, 512), (16, 512), (37, 97), (7, 3, 40)])
def test_norms_are_bit_for_bit_the_runners(old, shape):
    from mixboard_cpu.rms_norm_backend import RMSNormCpu

    dim, weight = shape[-1], torch.randn(shape[-1])
    impl = loaded(RMSNormCpu, RMSNormSpec(hidden_size=dim, eps=1e-5), RMSNormWeights(weight=weight))
    x = torch.randn(shape) * 3
    rows = x.reshape(-1, dim)
    want = torch.empty(rows.shape)
    old.rms_norm(rows.data_ptr(), rows.shape[0], 1, dim, dim, weight.data_ptr(), want.data_ptr(), dim, 1e-5)
    assert torch.equal(impl.forward(x, None)[0].reshape(-1, dim).view(torch.int32), want.view(torch.int32))
    if len(shape) == 2:  # the add written into the branch's output, then the norm
        branch = torch.randn(shape)
        total, want = branch.clone(), torch.empty(shape)
        old.add_rms_norm(total.data_ptr(), shape[0], dim, dim, x.data_ptr(), dim, weight.data_ptr(), want.data_ptr(),
                         dim, 1e-5)
        y, s = impl.forward(x, branch)
        assert torch.equal(y.view(torch.int32), want.view(torch.int32))
        assert torch.equal(s.view(torch.int32), total.view(torch.int32))


@pytest.mark.parametrize("head_size, rotary_dim", [(64, None), (64, 32), (24, None)])
def test_rotary_is_bit_for_bit_the_runners(old, head_size, rotary_dim):
    from mixboard_cpu.rotary_backend import RotaryCpu

    spec = RotarySpec(head_size=head_size, rotary_dim=rotary_dim)
    positions = torch.tensor([0, 1, 7, 300, 299, 2, 1000])
    qk = torch.randn(len(positions), 6, head_size)
    want = qk.clone()
    cos, sin = cos_sin(spec, 1001, torch.float32, "cpu")  # the runner's table, by the same formula
    old.rotary(want.data_ptr(), 7, 6, want.stride(0), want.stride(1), spec.dim, cos.data_ptr(), sin.data_ptr(),
               cos.stride(0), cos.shape[0], positions.data_ptr())
    q, k = loaded(RotaryCpu, spec).forward(positions, qk[:, :4], qk[:, 4:])
    assert torch.equal(torch.cat([q, k], 1).view(torch.int32), want.view(torch.int32))


def test_argmax_is_the_runners(old):
    from mixboard_cpu.argmax_backend import ArgmaxCpu

    logits = torch.randn(16, 32000)
    logits[3, 7] = float("nan")
    want = torch.empty(16, dtype=torch.int64)
    old.argmax(logits.data_ptr(), 16, 32000, 32000, want.data_ptr())
    assert torch.equal(loaded(ArgmaxCpu, ArgmaxSpec()).forward(logits), want)
