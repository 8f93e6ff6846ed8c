"""The flash_attn backend on CPU: its argument plumbing (cu_seqlens, max
seqlens, block table, dtypes, layouts) through a test double of
flash_attn_varlen_func (tests/plugins/doubles/flash_attn), checked against
the sdpa backend and the core oracle; its declarations and reasons; and its
selection over sdpa in a simulated CUDA environment."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mixboard import AttentionSpec, CommonBatchMetadata, Registry, simulate
from mixboard.kinds.attention import attention_state
from mixboard.ops.checks import BackendInputError
from mixboard.plugins import load
from mixboard.selection import module_missing
from mixboard.testing import AttentionOracle, allocate_state
from mixboard_flash_attn import FlashAttention
from mixboard_sdpa import SdpaAttention
from mixboard_sdpa.cpu_backend import kernel_unusable as sdpa_cpu_kernel_unusable
from attention_cases import (
    CPU, LAYER, decode_schedule, make_impl, max_error, one_prefill_schedule, random_schedule, random_seqs,
    run_schedule,
)

DOUBLES = Path(__file__).parent / "doubles"
H100 = simulate("cuda", "9.0")
PAGE = 256  # flash-attn's paged kernel takes blocks of a multiple of 256 tokens


def _forget_flash_attn():
    for name in [n for n in sys.modules if n == "flash_attn" or n.startswith("flash_attn.")]:
        del sys.modules[name]
    module_missing.cache_clear()  # selection caches whether a module can be found


@pytest.fixture
def flash_double(monkeypatch):
    """The test double importable as ``flash_attn`` for this test only."""
    _forget_flash_attn()
    monkeypatch.syspath_prepend(str(DOUBLES))
    import flash_attn

    assert flash_attn.IS_TEST_DOUBLE
    yield flash_attn
    _forget_flash_attn()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def only_attention_plugins(monkeypatch):
    """The installed entry points of these two distributions, nothing else."""
    monkeypatch.setenv("MIXBOARD_PLUGINS", "sdpa,flash_attn")
    for var in ("MIXBOARD_DISABLE_PLUGINS", "MIXBOARD_STRICT_PLUGINS", "MIXBOARD_BACKEND"):
        monkeypatch.delenv(var, raising=False)


# --------------------------------------------------------------------------- plumbing, through the double

SPECS = {
    "gqa": AttentionSpec(num_heads=8, num_kv_heads=2, head_size=16),
    "mqa": AttentionSpec(num_heads=4, num_kv_heads=1, head_size=32, scale=0.1),
    "window": AttentionSpec(num_heads=4, num_kv_heads=2, head_size=16, sliding_window=37),
    "softcap": AttentionSpec(num_heads=4, num_kv_heads=4, head_size=8, logits_soft_cap=2.0),
    "non_causal": AttentionSpec(num_heads=4, num_kv_heads=2, head_size=16, causal=False),
}
TOLERANCE = {"bfloat16": dict(atol=2e-2, rtol=2e-2), "float16": dict(atol=2e-3, rtol=2e-3)}
LENGTHS = [300, 1, 45, 270, 7, 130]  # two sequences span two pages


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_chunked_prefills_and_decodes_match_sdpa(flash_double, name, dtype):
    spec = dataclasses.replace(SPECS[name], dtype=dtype)
    seqs = random_seqs(spec, LENGTHS, seed=len(name))
    schedule = random_schedule(LENGTHS, seed=len(name), max_chunk=90)
    ours, state, metas = run_schedule(FlashAttention, spec, seqs, schedule, block_size=PAGE)
    ref, ref_state, _ = run_schedule(SdpaAttention, spec, seqs, schedule, block_size=PAGE)
    assert ours[0].dtype == getattr(torch, dtype)
    for o, r in zip(ours, ref):
        torch.testing.assert_close(o, r, **TOLERANCE[dtype])
    assert all(torch.equal(state[n], ref_state[n]) for n in state)
    assert any(m.common.num_decodes and m.common.num_prefills for m in metas)  # mixed steps were exercised


@pytest.mark.parametrize("name", ["gqa", "window", "softcap"])
def test_prefill_then_decodes_match_the_oracle(flash_double, name):
    spec = dataclasses.replace(SPECS[name], dtype="bfloat16")
    lengths = [70, 290, 12]
    seqs = random_seqs(spec, lengths, seed=5)
    schedule = decode_schedule(lengths, [60, 250, 3])
    ours, _, _ = run_schedule(FlashAttention, spec, seqs, schedule, block_size=PAGE)
    ref, _, _ = run_schedule(FlashAttention, spec, seqs, schedule, block_size=PAGE, impl=AttentionOracle(spec),
                             use_builder=False)
    for o, r in zip(ours, ref):
        torch.testing.assert_close(o, r, **TOLERANCE["bfloat16"])
    whole, _, _ = run_schedule(FlashAttention, spec, seqs, one_prefill_schedule(lengths), block_size=PAGE)
    for o, r in zip(ours, whole):
        torch.testing.assert_close(o, r, **TOLERANCE["bfloat16"])


def test_metadata_is_what_the_kernel_takes(flash_double):
    common = CommonBatchMetadata.build([1, 1, 40], [300, 9, 200], [0, 1, 2], [[3, 0], [2], [1]], PAGE)
    meta = FlashAttention.builder(SPECS["gqa"], H100)(common)
    assert meta.cu_seqlens_q.dtype == meta.cu_seqlens_k.dtype == meta.block_table.dtype == torch.int32
    assert meta.cu_seqlens_q.tolist() == [0, 1, 2, 42]
    assert meta.cu_seqlens_k.tolist() == [0, 301, 311, 551]  # running sum of total lengths: context + new
    assert (meta.max_seqlen_q, meta.max_seqlen_k) == (40, 301)
    assert meta.block_table.is_contiguous() and meta.block_range == (0, 3)


def test_takes_the_common_metadata_without_its_builder(flash_double):
    spec = dataclasses.replace(SPECS["window"], dtype="float16")
    seqs = random_seqs(spec, [40, 280], seed=1)
    schedule = random_schedule([40, 280], seed=1, max_chunk=100)
    ours, _, _ = run_schedule(FlashAttention, spec, seqs, schedule, block_size=PAGE, use_builder=False)
    ref, _, _ = run_schedule(SdpaAttention, spec, seqs, schedule, block_size=PAGE)
    assert max_error(ours, ref) <= 2e-3


def test_the_double_refuses_what_flash_attn_refuses(flash_double):
    """So that the plumbing tests above would catch a wrong dtype or layout."""
    q = torch.randn(3, 2, 8, dtype=torch.bfloat16)
    pool = torch.randn(2, PAGE, 2, 8, dtype=torch.bfloat16)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    table = torch.tensor([[1]], dtype=torch.int32)
    call = flash_double.flash_attn_varlen_func
    call(q, pool, pool, cu, cu, 3, 3, block_table=table)  # fine
    for args, kwargs, message in [
        ((q.float(), pool.float(), pool.float(), cu, cu, 3, 3), {"block_table": table}, "fp16 and bf16"),
        ((q, pool, pool, cu.long(), cu, 3, 3), {"block_table": table}, "cu_seqlens_q must have dtype int32"),
        ((q, pool, pool, cu, cu, 3, 3), {"block_table": table.long()}, "block_table must have dtype torch.int32"),
        ((q, pool[:, :16], pool[:, :16], cu, cu, 3, 3), {"block_table": table}, "divisible by 256"),
        ((q, pool, pool, cu, cu, 2, 3), {"block_table": table}, "max_seqlen_q is 2"),
    ]:
        with pytest.raises(RuntimeError, match=message):
            call(*args, **kwargs)


# --------------------------------------------------------------------------- bad input


def test_a_block_size_flash_attn_cannot_page_is_refused_by_the_builder():
    common = CommonBatchMetadata.build([3], [0], [0], [[1]], 16)
    with pytest.raises(BackendInputError) as info:
        FlashAttention.builder(SPECS["gqa"], H100)(common)
    assert "blocks of 16 tokens" in str(info.value) and "multiple of 256" in str(info.value)
    assert "block_size=256" in str(info.value)


def test_bad_inputs_name_the_layer(flash_double):
    spec = dataclasses.replace(SPECS["gqa"], dtype="bfloat16")
    common = CommonBatchMetadata.build([1, 2], [5, 0], [0, 1], [[1], [0]], PAGE)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 8, 16, generator=g).bfloat16()
    k = torch.randn(3, 2, 16, generator=g).bfloat16()
    state = allocate_state(attention_state(spec), 2, PAGE)
    impl = make_impl(FlashAttention, spec)
    cases = [
        ((q.float(), k, k, state), "q must be torch.bfloat16, got torch.float32"),
        ((q, k[:, :1], k, state), "k must have shape [3, 2, 16], got [3, 1, 16]"),
        ((q, k, k, {"k_cache": state["k_cache"]}), "state is missing v_cache"),
        ((q, k, k, {n: t[:1] for n, t in state.items()}), "uses blocks 0..1, but state['k_cache'] has blocks 0..0"),
    ]
    for args, message in cases:
        with pytest.raises(BackendInputError) as info:
            impl.forward(*args, common)
        assert str(info.value).startswith(LAYER + ": ") and message in str(info.value)


def test_make_impl_without_flash_attn_says_what_to_install(monkeypatch):
    _forget_flash_attn()
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # import fails, installed or not
    with pytest.raises(ImportError, match=r"pip install 'mixboard-flash-attn\[flash\]'"):
        FlashAttention.make_impl(SPECS["gqa"], H100)


# --------------------------------------------------------------------------- declarations, reasons, selection


def test_check_names_capability_and_head_size_limits():
    bf16 = AttentionSpec(dtype="bfloat16")
    assert FlashAttention.check(bf16, H100) == []
    assert FlashAttention.check(dataclasses.replace(bf16, head_size=96, num_heads=3, num_kv_heads=1,
                                                    sliding_window=128, logits_soft_cap=50.0), simulate("cuda", "8.0")) == []
    assert FlashAttention.check(dataclasses.replace(bf16, causal=False), H100) == []
    (reason,) = FlashAttention.check(bf16, simulate("cuda", "7.5"))
    assert "compute capability 8.0 or newer" in reason and "this GPU has 7.5" in reason
    (reason,) = FlashAttention.check(bf16, simulate("cuda"))
    assert "unknown" in reason and "--capability" in reason
    for head_size in (20, 264, 512):
        (reason,) = FlashAttention.check(dataclasses.replace(bf16, head_size=head_size), H100)
        assert f"head_size {head_size} is not supported" in reason and "up to 256 that are multiples of 8" in reason
    assert FlashAttention.check(bf16, CPU) == []  # the registry's device reason says it there


def _backends_json(*args):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    environ["MIXBOARD_PLUGINS"] = "sdpa,flash_attn"
    out = subprocess.run([sys.executable, "-m", "mixboard_runner", "backends", "--kind", "attention", "--json", *args],
                         capture_output=True, text=True, env=environ)
    assert out.returncode == 0, out.stderr
    return {b["name"]: b for b in json.loads(out.stdout)}


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
def test_mixboard_backends_gives_flash_attn_reasons_on_this_machine():
    rows = _backends_json("--device", "cpu")
    flash = rows["flash_attn"]
    assert (flash["available"], flash["distribution"], flash["priority"], flash["devices"], flash["dtypes"]) == (
        False, "mixboard-flash-attn", 100, ["cuda"], ["bfloat16", "float16"])
    assert flash["reasons"][0] == "runs on cuda; this environment is cpu"
    assert "needs Python module 'flash_attn', which is not installed" in flash["reasons"][1]
    assert "pip install 'mixboard-flash-attn[flash]'" in flash["reasons"][1]
    assert rows["sdpa"]["available"] and rows["sdpa"]["distribution"] == "mixboard-sdpa"
    h100 = _backends_json("--device", "cuda", "--capability", "9.0")["flash_attn"]
    assert len(h100["reasons"]) == 1 and "'flash_attn', which is not installed" in h100["reasons"][0]


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
def test_without_flash_attn_sdpa_serves_a_simulated_h100(only_attention_plugins):
    module_missing.cache_clear()
    registry = Registry(load())
    selection = registry.select("attention", AttentionSpec(dtype="bfloat16"), H100)
    assert selection.chosen.name == "sdpa"
    (reason,) = selection.rejected["flash_attn"]
    assert "needs Python module 'flash_attn'" in reason


def test_flash_attn_is_chosen_over_sdpa_where_it_applies(flash_double, only_attention_plugins):
    registry = Registry(load())
    assert {registry.backends[n].distribution for n in ("sdpa", "flash_attn")} == {"mixboard-sdpa", "mixboard-flash-attn"}
    bf16 = AttentionSpec(num_heads=32, num_kv_heads=8, head_size=128, dtype="bfloat16")
    chosen = registry.select("attention", bf16, H100)
    assert chosen.chosen.name == "flash_attn"
    assert "higher priority (100 > 10)" in chosen.rejected["sdpa"][0]
    # where it does not apply, sdpa serves (on a CPU sdpa_cpu, where its kernel is built), and flash_attn's
    # reasons say why
    on_cpu = "sdpa" if sdpa_cpu_kernel_unusable("bfloat16") else "sdpa_cpu"
    for spec, env, why, serves in [
        (bf16, simulate("cuda", "7.5"), "this GPU has 7.5", "sdpa"),
        (dataclasses.replace(bf16, dtype="float32"), H100, "supports dtypes bfloat16, float16; the layer is float32",
         "sdpa"),
        (dataclasses.replace(bf16, head_size=100), H100, "head_size 100 is not supported", "sdpa"),
        (bf16, CPU, "runs on cuda; this environment is cpu", on_cpu),
    ]:
        selection = registry.select("attention", spec, env)
        assert selection.chosen.name == serves
        assert any(why in r for r in selection.rejected["flash_attn"]), selection.rejected
    # a plan groups the layers it picked flash_attn for
    plan = registry.plan([(f"layers.{i}.attn", "attention", bf16) for i in range(3)], env=H100)
    assert [(g.backend, g.layers) for g in plan.groups] == [("flash_attn", ("layers.0.attn", "layers.1.attn", "layers.2.attn"))]


def test_the_kit_passes_in_half_precision_over_the_double(flash_double):
    from kit_over_doubles import kit_failures

    failed, counts = kit_failures(FlashAttention)
    assert not failed and counts["pass"] >= 45, failed
