"""The sdpa backend against the core oracle and transformers' own attention
modules (LlamaAttention, Gemma2Attention for soft-capping and scale), eager,
with the same weights: ragged batches, chunked prefills and decodes through
a shuffled paged cache."""

from __future__ import annotations

import dataclasses
import functools
import random

import pytest
import torch
from transformers import Gemma2Config, LlamaConfig
from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function
from transformers.models.gemma2 import modeling_gemma2
from transformers.models.llama import modeling_llama

from mixboard import AttentionSpec, CommonBatchMetadata, simulate
from mixboard.kinds.attention import attention_state
from mixboard.ops.checks import BackendInputError
from mixboard.plugins import load
from mixboard.selection import reasons_against
from mixboard.testing import AttentionOracle, allocate_state
from mixboard_sdpa import SdpaAttention
from mixboard_sdpa import meta as sdpa_meta
from attention_cases import (
    CPU, LAYER, Seqs, decode_schedule, make_impl, max_error, one_prefill_schedule, random_schedule, random_seqs,
    run_schedule,
)



@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny problems: one thread is fastest, and steady on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------- transformers as the reference


class HF:
    """One transformers attention module with random weights; our backend runs
    between its projections (+ its rotary embedding) and its o_proj."""

    def __init__(self, family: str, spec: AttentionSpec, hidden=48, seed=0):
        common = dict(hidden_size=hidden, num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
                      head_dim=spec.head_size, attn_implementation="eager")
        torch.manual_seed(seed)
        if family == "llama":
            assert spec.scale is None and spec.logits_soft_cap is None
            config = LlamaConfig(**common)
            self.attn = modeling_llama.LlamaAttention(config, layer_idx=0)
            self.rotary = modeling_llama.LlamaRotaryEmbedding(config)
            self.rope = modeling_llama.apply_rotary_pos_emb
        else:  # gemma2: logits soft-cap and a query_pre_attn_scalar scale
            scalar = round(spec.scale ** -2)  # transformers takes an int: scale = scalar ** -0.5
            assert abs(scalar ** -0.5 - spec.scale) < 1e-12
            config = Gemma2Config(**common, query_pre_attn_scalar=scalar,
                                  attn_logit_softcapping=spec.logits_soft_cap, sliding_window=spec.sliding_window or 4096)
            self.attn = modeling_gemma2.Gemma2Attention(config, layer_idx=0)
            self.rotary = modeling_gemma2.Gemma2RotaryEmbedding(config)
            self.rope = modeling_gemma2.apply_rotary_pos_emb
        self.attn.eval()
        self.spec, self.hidden = spec, hidden

    def _rotary(self, x):
        return self.rotary(x[None], torch.arange(x.shape[0])[None])

    @torch.no_grad()
    def backend_inputs(self, x):
        """q, k, v of one sequence as the backend receives them: [L, heads, D]."""
        L, D = x.shape[0], self.spec.head_size
        q = self.attn.q_proj(x).view(1, L, -1, D).transpose(1, 2)
        k = self.attn.k_proj(x).view(1, L, -1, D).transpose(1, 2)
        v = self.attn.v_proj(x).view(1, L, -1, D).transpose(1, 2)
        q, k = self.rope(q, k, *self._rotary(x))
        return (t[0].transpose(0, 1).contiguous() for t in (q, k, v))

    @torch.no_grad()
    def finish(self, attn_out):
        return self.attn.o_proj(attn_out.reshape(attn_out.shape[0], -1))

    @torch.no_grad()
    def module(self, x):
        """The module's own output for the whole sequence, masked by transformers' mask functions."""
        L, spec = x.shape[0], self.spec
        mask = None
        if spec.causal:
            fn = causal_mask_function if spec.sliding_window is None else sliding_window_causal_mask_function(spec.sliding_window)
            visible = fn(0, 0, torch.arange(L)[:, None], torch.arange(L)[None, :])
            mask = torch.zeros(L, L).masked_fill(~visible, torch.finfo(torch.float32).min)[None, None]
        return self.attn(x[None], position_embeddings=self._rotary(x), attention_mask=mask)[0][0]


def hf_case(family, spec, lengths, schedule, seed=0):
    """(our outputs after o_proj, the module's outputs), per sequence."""
    hf = HF(family, spec, seed=seed)
    g = torch.Generator().manual_seed(seed + 7)
    xs = [torch.randn(n, hf.hidden, generator=g) for n in lengths]
    qkv = [list(hf.backend_inputs(x)) for x in xs]
    seqs = Seqs(*map(list, zip(*qkv)))
    outs, _, _ = run_schedule(SdpaAttention, spec, seqs, schedule, seed=seed)
    return [hf.finish(o) for o in outs], [hf.module(x) for x in xs]


def random_lengths(rng, num_seqs, longest=40):
    return [rng.randint(1, longest) for _ in range(num_seqs)]


LLAMA_SPECS = {
    "mha": AttentionSpec(num_heads=4, num_kv_heads=4, head_size=16),
    "gqa": AttentionSpec(num_heads=8, num_kv_heads=2, head_size=16),
    "mqa": AttentionSpec(num_heads=4, num_kv_heads=1, head_size=16),
    "window": AttentionSpec(num_heads=4, num_kv_heads=2, head_size=16, sliding_window=5),
}
GEMMA_SPECS = {
    "softcap": AttentionSpec(num_heads=4, num_kv_heads=2, head_size=16, scale=25 ** -0.5, logits_soft_cap=3.0),
    "softcap_window": AttentionSpec(num_heads=4, num_kv_heads=1, head_size=16, scale=11 ** -0.5, logits_soft_cap=2.0,
                                    sliding_window=6),
}


@pytest.mark.parametrize("num_seqs", [1, 3, 8])
@pytest.mark.parametrize("family, name", [("llama", n) for n in LLAMA_SPECS] + [("gemma2", n) for n in GEMMA_SPECS])
def test_matches_transformers_module_over_chunked_prefills_and_decodes(family, name, num_seqs):
    spec = (LLAMA_SPECS if family == "llama" else GEMMA_SPECS)[name]
    rng = random.Random(num_seqs * 31 + len(name))
    lengths = random_lengths(rng, num_seqs)
    ours, theirs = hf_case(family, spec, lengths, random_schedule(lengths, seed=num_seqs, max_chunk=9), seed=num_seqs)
    assert max_error(ours, theirs) <= 1e-5


def test_non_causal_matches_transformers_module_on_a_ragged_prefill():
    spec = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=16, causal=False)
    lengths = [7, 1, 30, 12, 12, 3]
    ours, theirs = hf_case("llama", spec, lengths, one_prefill_schedule(lengths))
    assert max_error(ours, theirs) <= 1e-5


# --------------------------------------------------------------------------- the core oracle

ORACLE_SPECS = {
    **LLAMA_SPECS, **GEMMA_SPECS,
    "non_causal": AttentionSpec(num_heads=4, num_kv_heads=2, head_size=16, causal=False),
    "non_causal_softcap": AttentionSpec(num_heads=6, num_kv_heads=3, head_size=8, causal=False, logits_soft_cap=1.5),
    "head_size_24": AttentionSpec(num_heads=2, num_kv_heads=1, head_size=24, scale=0.5),
}


def oracle_outputs(spec, seqs, schedule, block_size=4):
    outs, state, _ = run_schedule(SdpaAttention, spec, seqs, schedule, block_size=block_size, impl=AttentionOracle(spec),
                                  use_builder=False)
    return outs, state


@pytest.mark.parametrize("name", sorted(ORACLE_SPECS))
def test_matches_the_oracle_step_by_step_and_writes_the_same_cache(name):
    spec = ORACLE_SPECS[name]
    lengths = [23, 1, 9, 40, 5, 17, 2, 30]
    schedule = random_schedule(lengths, seed=len(name), max_chunk=11)
    seqs = random_seqs(spec, lengths, seed=3)
    ours, state, _ = run_schedule(SdpaAttention, spec, seqs, schedule)
    ref, ref_state = oracle_outputs(spec, seqs, schedule)
    assert max_error(ours, ref) <= 1e-5
    assert all(torch.equal(state[n], ref_state[n]) for n in state)  # same writes, garbage left alone


@pytest.mark.parametrize("dtype, atol, rtol", [("bfloat16", 2e-2, 2e-2), ("float16", 2e-3, 2e-3)])
@pytest.mark.parametrize("name", ["gqa", "window", "softcap", "non_causal"])
def test_half_precision_matches_the_oracle(name, dtype, atol, rtol):
    spec = dataclasses.replace(ORACLE_SPECS[name], dtype=dtype)
    lengths = [12, 1, 33, 6]
    schedule = random_schedule(lengths, seed=5, max_chunk=8)
    seqs = random_seqs(spec, lengths, seed=4)
    ours, _, _ = run_schedule(SdpaAttention, spec, seqs, schedule)
    ref, _ = oracle_outputs(spec, seqs, schedule)
    assert ours[0].dtype == getattr(torch, dtype)
    for o, r in zip(ours, ref):
        torch.testing.assert_close(o, r, atol=atol, rtol=rtol)


# --------------------------------------------------------------------------- schedules agree with each other


@pytest.mark.parametrize("name", ["gqa", "window", "softcap_window"])
def test_prefill_then_decodes_and_chunked_prefill_equal_one_prefill(name):
    spec = ORACLE_SPECS[name]
    lengths = [20, 35, 9, 28]
    seqs = random_seqs(spec, lengths, seed=11)
    whole, _, _ = run_schedule(SdpaAttention, spec, seqs, one_prefill_schedule(lengths))
    decoded, _, _ = run_schedule(SdpaAttention, spec, seqs, decode_schedule(lengths, 6), seed=1)
    chunked, _, _ = run_schedule(SdpaAttention, spec, seqs, random_schedule(lengths, seed=2, max_chunk=7), seed=2)
    assert max_error(decoded, whole) <= 1e-5
    assert max_error(chunked, whole) <= 1e-5


def test_decodes_are_batched_and_split_longest_first_under_the_chunk_budget(monkeypatch):
    spec = ORACLE_SPECS["gqa"]
    lengths = [30, 14, 28, 40, 17, 25, 22, 19]
    seqs = random_seqs(spec, lengths, seed=2)
    schedule = decode_schedule(lengths, [9, 1, 2, 20, 5, 12, 3, 14])
    _, _, metas = run_schedule(SdpaAttention, spec, seqs, schedule)
    assert all(len(m.decode_chunks) == 1 for m in metas[1:])  # all decodes of a step in one call
    assert all(m._buffers is metas[0]._buffers for m in metas)  # one workspace for every step of the builder
    # a budget of 8 blocks of 4 per chunk (finer than the decode_chunk_mib option's MiB): several chunks,
    # sequences of like length together
    budget = 8 * 4 * sdpa_meta.bytes_per_token(spec)
    monkeypatch.setattr(SdpaAttention, "builder", classmethod(lambda cls, spec, env: functools.partial(
        sdpa_meta.build_meta, bytes_per_token=sdpa_meta.bytes_per_token(spec), workspace={}, chunk_bytes=budget)))
    ours, _, metas = run_schedule(SdpaAttention, spec, seqs, schedule)
    chunks = metas[2].decode_chunks
    assert len(chunks) > 2
    widths = [c.num_keys for c in chunks]
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]
    ref, _ = oracle_outputs(spec, seqs, schedule)
    assert max_error(ours, ref) <= 1e-5


@pytest.mark.parametrize("name", ["gqa", "window", "softcap_window", "non_causal"])
def test_fresh_prompts_of_one_length_share_a_call(name):
    spec = ORACLE_SPECS[name]
    lengths = [9, 9, 14, 14, 14, 9, 1]
    seqs = random_seqs(spec, lengths, seed=6)
    schedule = one_prefill_schedule(lengths)
    ours, _, metas = run_schedule(SdpaAttention, spec, seqs, schedule)
    assert [(p.count, p.query_len) for p in metas[0].prefills] == [(2, 9), (3, 14), (1, 9), (1, 1)]
    ref, _ = oracle_outputs(spec, seqs, schedule)
    assert max_error(ours, ref) <= 1e-5


def test_layers_with_different_windows_share_one_step_metadata():
    """The runner may build one metadata for layers that differ in window or cap."""
    base = ORACLE_SPECS["gqa"]
    specs = [base, dataclasses.replace(base, sliding_window=3), dataclasses.replace(base, logits_soft_cap=2.0)]
    meta_common = CommonBatchMetadata.build([1, 1, 6], [9, 4, 3], [0, 1, 2], [[5, 2, 0], [3, 7], [1, 4, 6]], 4)
    meta = SdpaAttention.builder(base, CPU)(meta_common)
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(8, 8, 16, generator=g), torch.randn(8, 2, 16, generator=g), torch.randn(8, 2, 16, generator=g)
    for spec in specs:
        state = allocate_state(attention_state(spec), 8, 4)
        for pool in state.values():
            pool.copy_(torch.randn(pool.shape, generator=g))
        ref_state = {n: t.clone() for n, t in state.items()}
        ours = make_impl(SdpaAttention, spec).forward(q, k, v, state, meta)
        ref = AttentionOracle(spec).forward(q, k, v, ref_state, meta_common)
        assert float((ours - ref).abs().max()) <= 1e-5, spec


def test_block_table_padding_is_never_read():
    """Columns past a sequence's own blocks may hold anything (a runner may pad with -1)."""
    spec = ORACLE_SPECS["gqa"]
    common = CommonBatchMetadata.build([1, 1, 2], [6, 1, 5], [0, 1, 2], [[4, 2], [0], [1, 3]], 4)
    padded = dataclasses.replace(common, block_table=common.block_table.clone())
    padded.block_table[1, 1:] = -1
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(4, 8, 16, generator=g), torch.randn(4, 2, 16, generator=g), torch.randn(4, 2, 16, generator=g)
    state = allocate_state(attention_state(spec), 5, 4)
    for pool in state.values():
        pool.copy_(torch.randn(pool.shape, generator=g))
    ref_state = {n: t.clone() for n, t in state.items()}
    ours = make_impl(SdpaAttention, spec).forward(q, k, v, state, SdpaAttention.builder(spec, CPU)(padded))
    ref = AttentionOracle(spec).forward(q, k, v, ref_state, common)
    assert float((ours - ref).abs().max()) <= 1e-5


def test_takes_the_common_metadata_without_its_builder():
    spec = ORACLE_SPECS["window"]
    lengths = [14, 3, 21]
    seqs = random_seqs(spec, lengths, seed=8)
    schedule = random_schedule(lengths, seed=8, max_chunk=5)
    ours, _, _ = run_schedule(SdpaAttention, spec, seqs, schedule, use_builder=False)
    ref, _ = oracle_outputs(spec, seqs, schedule)
    assert max_error(ours, ref) <= 1e-5


# --------------------------------------------------------------------------- bad input names the layer


def _step(spec):
    common = CommonBatchMetadata.build([1, 3], [4, 0], [0, 1], [[2, 0], [1]], 4)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(4, spec.num_heads, spec.head_size, generator=g)
    k = torch.randn(4, spec.num_kv_heads, spec.head_size, generator=g)
    v = torch.randn(4, spec.num_kv_heads, spec.head_size, generator=g)
    return q, k, v, allocate_state(attention_state(spec), 3, 4), SdpaAttention.builder(spec, CPU)(common)


def _bad(what):
    spec = ORACLE_SPECS["gqa"]
    q, k, v, state, meta = _step(spec)
    args = {"q": q, "k": k, "v": v, "state": state, "meta": meta}
    what(args)
    with pytest.raises(BackendInputError) as info:
        make_impl(SdpaAttention, spec).forward(**args)
    message = str(info.value)
    assert message.startswith(LAYER + ": ")
    return message


def test_bad_inputs_name_the_layer_what_was_expected_and_what_arrived():
    assert "q must have shape [4, 8, 16], got [4, 4, 16]" in _bad(lambda a: a.update(q=a["q"][:, :4]))
    assert "k must be torch.float32, got torch.bfloat16" in _bad(lambda a: a.update(k=a["k"].bfloat16()))
    assert "v must be on cpu, got meta" in _bad(lambda a: a.update(v=a["v"].to("meta")))
    assert "state is missing v_cache (has k_cache)" in _bad(lambda a: a["state"].pop("v_cache"))
    assert "state['k_cache'] must have shape [*, 4, 2, 16], got [3, 4, 1, 16]" in _bad(
        lambda a: a["state"].update(k_cache=a["state"]["k_cache"][:, :, :1].contiguous()))
    assert ("state['v_cache'] must be [num_records, 4, 2, 16] with each record contiguous and records at least one "
            "record apart (stride(0) >= 128), got strides [128, 32, 1, 2]") in _bad(
        lambda a: a["state"].update(v_cache=a["state"]["v_cache"].transpose(2, 3).contiguous().transpose(2, 3)))
    assert "state['v_cache'] must be torch.float32, got torch.float16" in _bad(
        lambda a: a["state"].update(v_cache=a["state"]["v_cache"].half()))
    assert "uses blocks 0..2, but state['k_cache'] has blocks 0..1" in _bad(
        lambda a: a["state"].update(k_cache=a["state"]["k_cache"][:2], v_cache=a["state"]["v_cache"][:2]))
    assert "meta must be the step's CommonBatchMetadata" in _bad(lambda a: a.update(meta={"num_tokens": 4}))


# --------------------------------------------------------------------------- declarations and registration


def test_serves_every_attention_spec_in_its_dtypes_on_any_device():
    for dtype in ("float32", "bfloat16", "float16"):
        for spec in (AttentionSpec(dtype=dtype), AttentionSpec(num_heads=32, num_kv_heads=1, head_size=80, dtype=dtype,
                                                              sliding_window=7, logits_soft_cap=30.0, scale=0.1)):
            for env in (CPU, simulate("cuda", "7.0"), simulate("mps")):
                assert reasons_against(SdpaAttention, spec, env) == ()
    assert reasons_against(SdpaAttention, AttentionSpec(dtype="float64"), CPU) == (
        "supports dtypes float32, bfloat16, float16; the layer is float64",)


def test_registers_through_its_entry_point_only(monkeypatch):
    monkeypatch.setenv("MIXBOARD_PLUGINS", "sdpa")
    entry = load().backends["sdpa"]
    assert (entry.cls, entry.plugin, entry.distribution, entry.version) == (SdpaAttention, "sdpa", "mixboard-sdpa", "0.1.0")
