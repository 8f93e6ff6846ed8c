"""The runner's own CPU products (``_cpu_kernels.c`` through ``models/panels.py``)
against float64 products, on every instruction set this CPU runs; the tied
table stored once as panels; one OpenMP runtime with torch; and what the
runner does and says where the kernel is not built."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from checkpoints import make_checkpoint
from mixboard_runner.loader import load_model
from mixboard_runner import kernels
from mixboard_runner.models import panels
from mixboard_runner.models.panels import PanelEmbedding, PanelLinear, from_panels, to_panels

pytestmark = pytest.mark.skipif(panels.UNAVAILABLE is not None, reason=str(panels.UNAVAILABLE))
ISAS = kernels.native.supported() if kernels.native else ()


@pytest.fixture(params=ISAS)
def isa(request):
    kernels.native.use_isa(request.param)
    yield request.param
    kernels.native.use_isa("")


def reference(x, linear):
    bias = None if linear.bias is None else linear.bias.double()
    return F.linear(x.double(), linear.weight.double(), bias).float()


# out x in: whole panels, a short last panel, a single output, an odd inner size, rows 4 KB apart (copied first)
@pytest.mark.parametrize("out_features, in_features", [(64, 48), (200, 96), (37, 97), (1, 5), (24, 1024)])
@pytest.mark.parametrize("bias", [True, False])
def test_products_match_float64_at_every_row_count(isa, out_features, in_features, bias):
    torch.manual_seed(out_features + in_features)
    linear = nn.Linear(in_features, out_features, bias=bias)
    layer = PanelLinear.of(linear)
    for rows in (1, 2, 7, 8, 9, 15, 16, 17, 31, 63, 64, 65, 130):  # tile edges (8, 16) and chunk edges (64)
        x = torch.randn(rows, in_features)
        torch.testing.assert_close(layer(x), reference(x, linear), atol=2e-5, rtol=1e-5, msg=f"{isa} rows={rows}")


# SwiGLU's gate in the product (PanelLinear.gated): silu(gate(x)) * up(x) against float64
@pytest.mark.parametrize("out_features, in_features, bias", [(64, 48, False), (37, 97, True), (1536, 512, False)])
def test_gated_products_match_float64_silu_times_up(isa, out_features, in_features, bias):
    torch.manual_seed(out_features)
    gate, up = nn.Linear(in_features, out_features, bias=bias), nn.Linear(in_features, out_features, bias=bias)
    layer = PanelLinear.gated(gate, up)
    assert layer.out_features == out_features and layer.is_gated
    for rows in (1, 5, 16, 20, 65, 130):  # one row, tiles, packed (12-32 rows), chunks
        x = torch.randn(rows, in_features) * 4  # gates far into both tails of silu
        want = (F.silu(reference(x, gate).double()) * reference(x, up).double()).float()
        torch.testing.assert_close(layer(x), want, atol=2e-5, rtol=1e-5, msg=f"{isa} rows={rows}")


def test_gated_products_at_silus_extremes(isa):
    values = torch.tensor([-1e4, -200.0, -88.5, -87.0, -20.0, -1e-3, 0.0, 1e-3, 20.0, 88.5, 200.0, 1e4])
    gate, up = nn.Linear(12, 12, bias=False), nn.Linear(12, 12, bias=False)
    with torch.no_grad():
        gate.weight.copy_(torch.eye(12))
        up.weight.copy_(torch.eye(12))
    got = PanelLinear.gated(gate, up)(values[None])[0]
    torch.testing.assert_close(got, F.silu(values) * values, atol=1e-30, rtol=2e-6)


def test_strided_batched_and_empty_inputs(isa):
    torch.manual_seed(0)
    linear = nn.Linear(40, 50)
    layer = PanelLinear.of(linear)
    wide, page = torch.randn(9, 70), torch.randn(5, 2048)  # page: rows 8 KB apart, copied closer first
    for x in (wide[:, 3:43], wide.t().contiguous().t()[:, :40], page[:, 100:140], torch.randn(2, 3, 40),
              torch.randn(0, 40)):
        got = layer(x)
        assert got.shape == (*x.shape[:-1], 50)
        torch.testing.assert_close(got, reference(x, linear), atol=2e-5, rtol=1e-5)


def test_the_thread_count_does_not_change_a_bit(isa):
    # each output is summed by one thread, in an order fixed by the row count alone
    torch.manual_seed(1)
    linear = nn.Linear(512, 300)
    layer = PanelLinear.of(linear)
    threads = torch.get_num_threads()
    try:
        for rows in (1, 20):
            x = torch.randn(rows, 512)
            results = []
            for n in (1, 2, 3):
                torch.set_num_threads(n)
                results.append(layer(x))
            assert all(torch.equal(r, results[0]) for r in results), rows
    finally:
        torch.set_num_threads(threads)


def test_an_instruction_set_this_cpu_lacks_is_refused():
    with pytest.raises(ValueError, match="not run by this CPU or not compiled in"):
        kernels.native.use_isa("sse9")
    assert panels.isa() == ISAS[0]


@pytest.mark.parametrize("rows", [37, 48])
def test_a_table_on_panels_looks_up_and_projects_as_the_row_major_one(rows):
    torch.manual_seed(rows)
    table = torch.randn(rows, 24)
    stored = to_panels(table)
    assert stored.shape == (-(-rows // 16), 24, 16) and torch.equal(from_panels(stored, rows), table)
    ids = torch.tensor([0, rows - 1, 7, 7, 16])
    assert torch.equal(PanelEmbedding(stored, rows)(ids), F.embedding(ids, table))
    head = PanelLinear(24, rows, stored, None)
    for n in (1, 16):
        x = torch.randn(n, 24)
        torch.testing.assert_close(head(x), F.linear(x.double(), table.double()).float(), atol=2e-5, rtol=1e-5)


def test_a_loaded_tied_model_keeps_one_table_as_panels(tmp_path):
    make_checkpoint("lfm2", tmp_path)  # LFM2's test checkpoint ties its embeddings
    model = load_model(tmp_path)
    embed, head = model.trunk.embed_tokens, model.lm_head
    assert isinstance(embed, PanelEmbedding) and isinstance(head, PanelLinear)
    assert head.panels.data_ptr() == embed.panels.data_ptr()  # one table, no copy
    assert all(isinstance(m, PanelLinear) for m in model.modules() if "proj" in type(m).__name__.lower())
    assert not any(type(m) is nn.Linear for m in model.modules())


def run_python(script: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_kernel_runs_on_torchs_openmp_runtime():
    out = run_python("""
        import torch
        from mixboard_runner.models import panels
        print(sorted({line.split()[-1] for line in open('/proc/self/maps') if 'libgomp' in line}))
        print(torch.__file__)
    """)
    maps, torch_file = out.splitlines()
    libraries = eval(maps)
    assert len(libraries) == 1, libraries  # one runtime, one thread pool shared with torch
    assert libraries[0].startswith(torch_file.rsplit("/", 1)[0])


def test_without_the_kernel_the_runner_says_so_and_keeps_onednn(tmp_path):
    reference = make_checkpoint("lfm2", tmp_path)
    torch.manual_seed(2)
    ids = torch.randint(0, 160, (21,)).tolist()
    with torch.no_grad():
        expected = reference(torch.tensor([ids])).logits[0]
    out = run_python(f"""
        import json, sys
        sys.modules["mixboard_runner._cpu_kernels"] = None  # as if it had not been built
        from mixboard_runner.engine import Engine
        engine = Engine({str(tmp_path)!r}, cache_memory=2**24)
        table = engine.model.trunk.embed_tokens.weight
        print(json.dumps({{"products": engine.products, "head": type(engine.model.lm_head).__name__,
                          "column_major": table.stride() == (1, table.shape[0]),
                          "logits": engine.score({ids}, 7).tolist()}}))
    """)
    got = json.loads(out)
    if not torch.backends.mkldnn.is_available():
        pytest.skip("torch built without oneDNN")
    assert got["products"].startswith("oneDNN packed (mixboard_runner._cpu_kernels is not built")
    assert got["head"] == "OneDnnLinear" and got["column_major"]
    torch.testing.assert_close(torch.tensor(got["logits"]), expected, atol=1e-4, rtol=0)
