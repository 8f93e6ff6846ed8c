"""sdpa against transformers' LlamaAttention (eager and sdpa), side by side.

Run by hand (not a test):  python benchmarks/kernels/bench_attention.py [--repeats 5] [--threads 2]

Two views of the same work, float32, hidden 1,024, 16 heads of 64 (MHA),
torch.set_num_threads(2) unless --threads says otherwise:

* module: the whole attention layer. transformers' module as is; ours as the
  module's q/k/v projections + its rotary embedding -> the sdpa backend ->
  its o_proj, with the same weights. Both get the rotary cos/sin made
  outside the timing (a model makes them once per step for all layers).
* core: only what the backend replaces. transformers: DynamicCache.update
  followed by its attention function (eager or sdpa); ours: the backend's
  forward (cache write + attention) on the same q, k, v.

Prefill: 4 sequences of 1,024 new tokens (transformers: one [4, 1024]
batch with a causal mask; ours: the same tokens packed, K/V written to a
paged cache of 16-token blocks). Decode: one step of 16 sequences, each with
1,024 cached tokens (transformers: its DynamicCache, cropped back to 1,024
before every step so each step does the same work; ours: the paged cache,
blocks handed out in shuffled order). Every contender runs alternately with
the others and the median is reported; outputs are compared, so a fast wrong
answer cannot pass.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
from transformers import LlamaConfig
from transformers.cache_utils import DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.llama.modeling_llama import (
    LlamaAttention, LlamaRotaryEmbedding, apply_rotary_pos_emb, eager_attention_forward,
)

from mixboard import AttentionSpec, CommonBatchMetadata, simulate
from mixboard.kinds.attention import attention_state
from mixboard.ops.checks import build_impl
from mixboard.testing import allocate_state
from mixboard_sdpa import SdpaAttention

HIDDEN, HEADS, HEAD_DIM, BLOCK = 1024, 16, 64, 16
IMPLEMENTATIONS = ("eager", "sdpa")


def make_modules():
    modules = {}
    for impl in IMPLEMENTATIONS:
        config = LlamaConfig(hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                             head_dim=HEAD_DIM, num_hidden_layers=1, attn_implementation=impl)
        torch.manual_seed(0)  # the same weights in both
        modules[impl] = LlamaAttention(config, layer_idx=0).eval()
    return modules, LlamaRotaryEmbedding(config)


class Ours:
    """The module's projections and rotary embedding around the sdpa backend, on packed tokens."""

    def __init__(self, module: LlamaAttention, rotary):
        self.m, self.rotary = module, rotary
        self.spec = AttentionSpec(num_heads=HEADS, num_kv_heads=HEADS, head_size=HEAD_DIM)
        env = simulate("cpu")
        self.impl = build_impl(SdpaAttention, self.spec, env, "bench.self_attn")
        self.build = SdpaAttention.builder(self.spec, env)

    def rope(self, x: torch.Tensor, positions: torch.Tensor):
        """cos, sin of each packed token: computed once per step for all layers, as a model does."""
        cos, sin = self.rotary(x[None], positions[None])
        return cos[0], sin[0]

    def qkv(self, x: torch.Tensor, rope):
        m, T = self.m, x.shape[0]
        q = m.q_proj(x).view(T, HEADS, HEAD_DIM)
        k = m.k_proj(x).view(T, HEADS, HEAD_DIM)
        v = m.v_proj(x).view(T, HEADS, HEAD_DIM)
        q, k = apply_rotary_pos_emb(q, k, *rope, unsqueeze_dim=1)
        return q, k, v

    def __call__(self, x, rope, state, meta):
        q, k, v = self.qkv(x, rope)
        return self.m.o_proj(self.impl.forward(q, k, v, state, meta).view(x.shape[0], -1))


def paged(num_seqs: int, tokens: int, seed: int = 0):
    """Shuffled block tables covering ``tokens`` (+1 for a decode) per sequence."""
    per = -(-(tokens + 1) // BLOCK)
    ids = list(range(num_seqs * per))
    random.Random(seed).shuffle(ids)
    return [ids[i * per:(i + 1) * per] for i in range(num_seqs)], num_seqs * per


def causal_mask(batch: int, length: int) -> torch.Tensor:
    """The additive mask transformers' eager path takes (sdpa gets none and uses is_causal)."""
    mask = torch.full((length, length), torch.finfo(torch.float32).min).triu(1)
    return mask[None, None].expand(batch, 1, length, length)


def medians(fns: dict, repeats: int, before=lambda: None) -> dict:
    """Median wall time (ms) of each, run alternately so all see the same machine load."""
    times = {name: [] for name in fns}
    for fn in fns.values():  # warm-up
        before()
        fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            before()
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def bench_prefill(modules, rotary, ours, repeats, seqs=4, length=1024):
    x = torch.randn(seqs, length, HIDDEN)
    packed = x.reshape(-1, HIDDEN)
    rope = ours.rope(packed, torch.arange(length).repeat(seqs))
    tables, num_blocks = paged(seqs, length)
    common = CommonBatchMetadata.build([length] * seqs, [0] * seqs, list(range(seqs)), tables, BLOCK)
    state = allocate_state(attention_state(ours.spec), num_blocks, BLOCK)
    masks = {"eager": causal_mask(seqs, length), "sdpa": None}
    pos_emb = rotary(x, torch.arange(length)[None].expand(seqs, length))

    def module(impl):
        return lambda: modules[impl](x, position_embeddings=pos_emb, attention_mask=masks[impl])[0]

    def mine():
        return ours(packed, rope, state, ours.build(common))  # the builder runs once per step

    # core: the same q, k, v in each side's layout
    q, k, v = ours.qkv(packed, rope)
    hq, hk, hv = (t.view(seqs, length, HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v))
    attention = {"eager": eager_attention_forward, "sdpa": sdpa_attention_forward}

    def core(impl):
        def run():
            cache = DynamicCache()
            key, value = cache.update(hk, hv, 0)
            return attention[impl](modules[impl], hq, key, value, masks[impl], scaling=HEAD_DIM ** -0.5)[0]
        return run

    def core_mine():
        return ours.impl.forward(q, k, v, state, ours.build(common))

    ref = modules["eager"](x, position_embeddings=pos_emb, attention_mask=masks["eager"])[0].reshape(-1, HIDDEN)
    err = max(float((mine() - ref).abs().max()),
              float((core_mine() - core("eager")().reshape(-1, HEADS, HEAD_DIM)).abs().max()))
    full = medians({**{impl: module(impl) for impl in IMPLEMENTATIONS}, "ours": mine}, repeats)
    cores = medians({**{impl: core(impl) for impl in IMPLEMENTATIONS}, "ours": core_mine}, repeats)
    return full, cores, seqs * length, err


def bench_decode(modules, rotary, ours, repeats, batch=16, context=1024):
    prompt = torch.randn(batch, context, HIDDEN)
    pos_emb = rotary(prompt, torch.arange(context)[None].expand(batch, context))
    caches = {}
    for impl in IMPLEMENTATIONS:
        caches[impl] = DynamicCache()
        modules[impl](prompt, position_embeddings=pos_emb, attention_mask=causal_mask(batch, context), cache=caches[impl])
    tables, num_blocks = paged(batch, context, seed=1)
    state = allocate_state(attention_state(ours.spec), num_blocks, BLOCK)
    prefill = CommonBatchMetadata.build([context] * batch, [0] * batch, list(range(batch)), tables, BLOCK)
    packed = prompt.reshape(-1, HIDDEN)
    ours(packed, ours.rope(packed, torch.arange(context).repeat(batch)), state, ours.build(prefill))
    step = CommonBatchMetadata.build([1] * batch, [context] * batch, list(range(batch)), tables, BLOCK)

    token = torch.randn(batch, 1, HIDDEN)
    positions = torch.full((batch,), context)
    step_emb = rotary(token, positions[:, None])
    rope = ours.rope(token[:, 0], positions)

    def crop():  # every step attends exactly `context` cached tokens + the new one
        for cache in caches.values():
            extra = cache.get_seq_length() - context
            if extra:
                cache.crop(-extra)

    def module(impl):
        return lambda: modules[impl](token, position_embeddings=step_emb, attention_mask=None, cache=caches[impl])[0]

    def mine():
        return ours(token[:, 0], rope, state, ours.build(step))

    q, k, v = ours.qkv(token[:, 0], rope)
    hq, hk, hv = (t[:, :, None] for t in (q, k, v))  # [batch, heads, 1, dim]
    attention = {"eager": eager_attention_forward, "sdpa": sdpa_attention_forward}

    def core(impl):
        def run():
            key, value = caches[impl].update(hk, hv, 0)
            return attention[impl](modules[impl], hq, key, value, None, scaling=HEAD_DIM ** -0.5)[0]
        return run

    def core_mine():
        return ours.impl.forward(q, k, v, state, ours.build(step))

    crop()
    err = float((mine() - module("eager")()[:, 0]).abs().max())
    crop()
    err = max(err, float((core_mine() - core("eager")()[:, 0]).abs().max()))
    full = medians({**{impl: module(impl) for impl in IMPLEMENTATIONS}, "ours": mine}, repeats, before=crop)
    cores = medians({**{impl: core(impl) for impl in IMPLEMENTATIONS}, "ours": core_mine}, repeats, before=crop)
    return full, cores, batch, err


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    modules, rotary = make_modules()
    ours = Ours(modules["eager"], rotary)
    rows = []
    with torch.inference_mode():
        for name, bench in (("prefill 4 x 1024", bench_prefill), ("decode step, batch 16, context 1024", bench_decode)):
            full, cores, tokens, err = bench(modules, rotary, ours, args.repeats)
            rows.append((name, "module", full, tokens, err))
            rows.append((name, "core", cores, tokens, err))
    print(f"attention: hidden {HIDDEN}, {HEADS} heads x {HEAD_DIM} (MHA), cache blocks of {BLOCK}; float32, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}\n")
    print("| case | scope | transformers eager (ms) | transformers sdpa (ms) | sdpa backend (ms) | speed-up vs eager "
          "| vs sdpa | tok/s ours | max abs diff |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, scope, t, tokens, err in rows:
        print(f"| {name} | {scope} | {t['eager']:.1f} | {t['sdpa']:.1f} | {t['ours']:.1f} | "
              f"{t['eager'] / t['ours']:.2f}x | {t['sdpa'] / t['ours']:.2f}x | {tokens / t['ours'] * 1e3:,.0f} | {err:.1e} |")


if __name__ == "__main__":
    main()
