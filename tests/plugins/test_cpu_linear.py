"""``linear_cpu`` (products on panels, on every instruction set this CPU
runs) and ``linear_onednn`` against the kind's oracle: outputs off the 16
lanes, tile and chunk edges of the row count, strided rows, gated SwiGLU,
bias; the thread count never changes a bit; one OpenMP runtime with torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from mixboard import LinearSpec, LinearWeights
from mixboard_cpu.compiled import PANELS, kernel_unusable
from mixboard_cpu.linear_backend import LinearCpu
from mixboard_cpu.linear_onednn_backend import LinearOneDnn
from cpu_ops import loaded, oracle

pytestmark = pytest.mark.skipif(bool(kernel_unusable(PANELS)), reason=f"{PANELS} is not built")
ROWS = (1, 2, 7, 8, 9, 15, 16, 17, 31, 37, 63, 64, 65, 130)  # tiles (8, 16), packed x (12-32), chunks (64)


def _isas():
    if kernel_unusable(PANELS):
        return ()
    from mixboard_cpu import _panels

    return _panels.supported()


@pytest.fixture(params=["linear_onednn", *_isas()])
def backend(request):
    """linear_onednn, and linear_cpu on each instruction set."""
    if request.param == "linear_onednn":
        yield LinearOneDnn
        return
    from mixboard_cpu import _panels

    _panels.use_isa(request.param)
    yield LinearCpu
    _panels.use_isa("")


def weights(spec, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(spec.weight_rows, spec.in_features, generator=g) / spec.in_features ** 0.5 * scale
    b = torch.randn(spec.weight_rows, generator=g) if spec.bias else None
    return LinearWeights(weight=w, bias=b)


# out x in: whole panels, a short last panel, a single output, an odd inner size, rows 4 KB apart (copied first)
@pytest.mark.parametrize("out_features, in_features", [(64, 48), (200, 96), (37, 97), (1, 5), (24, 1024)])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("gated", [False, True])
def test_matches_the_oracle_at_every_row_count(backend, out_features, in_features, bias, gated):
    spec = LinearSpec(in_features=in_features, out_features=out_features, bias=bias, gated=gated)
    w = weights(spec, out_features + in_features)
    impl, ref = loaded(backend, spec, w), oracle(spec, w)
    for rows in ROWS:
        x = torch.randn(rows, in_features)
        got = impl.forward(x)
        assert got.shape == (rows, out_features) and got.dtype == torch.float32
        torch.testing.assert_close(got, ref.forward(x), atol=2e-5, rtol=1e-5, msg=f"rows={rows}")


def test_gated_products_at_silus_extremes(backend):
    values = torch.tensor([-1e4, -200.0, -88.5, -87.0, -20.0, -1e-3, 0.0, 1e-3, 20.0, 88.5, 200.0, 1e4])
    spec = LinearSpec(in_features=12, out_features=12, gated=True)
    got = loaded(backend, spec, LinearWeights(weight=torch.cat([torch.eye(12), torch.eye(12)]), bias=None))
    torch.testing.assert_close(got.forward(values[None])[0], F.silu(values) * values, atol=1e-30, rtol=2e-6)


def test_strided_batched_and_empty_inputs(backend):
    spec = LinearSpec(in_features=40, out_features=50, bias=True)
    w = weights(spec, 0)
    impl, ref = loaded(backend, spec, w), oracle(spec, w)
    wide, page = torch.randn(9, 70), torch.randn(5, 2048)  # page: rows 8 KB apart, copied closer first
    for x in (wide[:, 3:43], page[:, 100:140], torch.randn(0, 40)):
        got = impl.forward(x)
        assert got.shape == (x.shape[0], 50)
        torch.testing.assert_close(got, ref.forward(x), atol=2e-5, rtol=1e-5)


def test_views_of_a_fused_product_are_read_where_they_lie():
    spec = LinearSpec(in_features=32, out_features=20)
    w = weights(spec, 1)
    impl = loaded(LinearCpu, spec, w)
    qkv = torch.randn(16, 96)
    x = qkv[:, 32:64]  # rows 96 floats apart
    before = qkv.clone()
    torch.testing.assert_close(impl.forward(x), oracle(spec, w).forward(x), atol=2e-5, rtol=1e-5)
    assert torch.equal(qkv, before)  # its input untouched


def test_an_input_of_the_wrong_width_is_refused_not_read_past():
    spec = LinearSpec(in_features=32, out_features=8)
    impl = loaded(LinearCpu, spec, weights(spec, 0))
    with pytest.raises(ValueError, match="the input has 31 features; the weight takes 32"):
        impl.forward(torch.randn(4, 31))


def test_the_thread_count_does_not_change_a_bit():
    # each output is summed by one thread, in an order fixed by the row count alone
    spec = LinearSpec(in_features=512, out_features=300)
    impl = loaded(LinearCpu, spec, weights(spec, 1))
    threads = torch.get_num_threads()
    try:
        for rows in (1, 20, 100):
            x = torch.randn(rows, 512)
            results = []
            for n in (1, 2, 3):
                torch.set_num_threads(n)
                results.append(impl.forward(x))
            assert all(torch.equal(r, results[0]) for r in results), rows
    finally:
        torch.set_num_threads(threads)


def test_an_instruction_set_this_cpu_lacks_is_refused():
    from mixboard_cpu import _panels, panels

    with pytest.raises(ValueError, match="not run by this CPU or not compiled in"):
        _panels.use_isa("sse9")
    assert panels.isa() == _isas()[0]


def test_the_kernels_run_on_torchs_openmp_runtime():
    script = """
        import torch
        from mixboard_cpu import linear_impl, rms_norm_impl
        print(sorted({line.split()[-1] for line in open('/proc/self/maps') if 'libgomp' in line}))
        print(torch.__file__)
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    maps, torch_file = out.stdout.splitlines()
    libraries = eval(maps)
    assert len(libraries) == 1, libraries  # one runtime, one thread pool shared with torch
    assert libraries[0].startswith(torch_file.rsplit("/", 1)[0])
