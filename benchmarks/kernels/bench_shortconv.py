"""short_conv_torch against transformers' Lfm2ShortConv, side by side in one run.

    python benchmarks/kernels/bench_shortconv.py [--repeats 20] [--threads 2]
    python benchmarks/kernels/bench_shortconv.py --cpu [--dtype bfloat16] [--threads 1]

With ``--cpu``: short_conv_torch against short_conv_cpu instead, in the layer's dtype (float32 or
bfloat16, the state in the same dtype, as vLLM keeps an LFM2's), at vLLM's bench shape (hidden 256,
bench_modes.py's lfm2) and at LFM2's (hidden 1024): one decode step of 16 sequences on scattered
slots, and a prefill of 4 x 64 tokens; each side's median over alternating calls, and the largest
difference between their outputs.

LFM2 dimensions: hidden 1024, L_cache 3, float32, 2 threads. Two cases:
prefill of 4 x 1,024 tokens (state saved for each sequence), and one decode
step at batch 16 continuing from saved state (transformers through its
DynamicCache: its single-token update path, no recomputation).

"mixer" rows time exactly what the backend replaces: everything between
in_proj and out_proj (transformers' module with both projections swapped for
nn.Identity and fed the in_proj output; ours: the step's builder + forward).
"layer" rows add the same in_proj/out_proj on both sides, for scale.
Prints a markdown table of medians, with the machine's load average: on a
shared machine, compare the ratios, not the milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch import nn
from transformers.cache_utils import DynamicCache
from transformers.models.lfm2.configuration_lfm2 import Lfm2Config
from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv

from mixboard import CommonBatchMetadata, ShortConvSpec, ShortConvWeights, simulate
from mixboard.kinds.short_conv import short_conv_state
from mixboard.ops.checks import build_impl
from mixboard.testing import allocate_state
from mixboard_shortconv import ShortConvCpu, ShortConvTorch

HIDDEN, WIDTH = 1024, 3
PREFILL_SEQS, PREFILL_LEN = 4, 1024
DECODE_BATCH, DECODE_CONTEXT = 16, 64


def median_ms(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def side_by_side(a, b, repeats):
    """Alternate a and b so that noise from the shared machine hits both alike."""
    for _ in range(2):
        a(), b()
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(median_ms(a, 1))
        tb.append(median_ms(b, 1))
    return statistics.median(ta), statistics.median(tb)


class Case:
    def __init__(self, with_projections: bool):
        config = Lfm2Config(hidden_size=HIDDEN, conv_L_cache=WIDTH, conv_bias=False, num_hidden_layers=1,
                            layer_types=["conv"], num_attention_heads=16, num_key_value_heads=8)
        torch.manual_seed(0)
        self.config = config
        self.hf = Lfm2ShortConv(config, layer_idx=0).eval()
        self.in_proj, self.out_proj = self.hf.in_proj, self.hf.out_proj
        if not with_projections:
            self.hf.in_proj, self.hf.out_proj = nn.Identity(), nn.Identity()
        self.with_projections = with_projections
        spec = ShortConvSpec(hidden_size=HIDDEN, conv_width=WIDTH)
        env = simulate("cpu")
        self.build = ShortConvTorch.builder(spec, env)
        self.impl = build_impl(ShortConvTorch, spec, env, "bench.conv")
        self.weights = ShortConvWeights(self.hf.conv.weight.detach().squeeze(1), None)
        self.pool = allocate_state(short_conv_state(spec), 32)

    def hf_input(self, batch, length):
        features = HIDDEN if self.with_projections else 3 * HIDDEN
        return torch.randn(batch, length, features)

    def ours(self, hidden, common):
        bcx = self.in_proj(hidden) if self.with_projections else hidden
        B, C, x = bcx.chunk(3, dim=-1)
        y = self.impl.forward(B, C, x, self.weights, self.pool, self.build(common))
        return self.out_proj(y) if self.with_projections else y


def meta(query_lens, context_lens, slots=None):
    n = len(query_lens)
    slots = list(range(n)) if slots is None else slots
    return CommonBatchMetadata.build(query_lens, context_lens, slots, [[0]] * n, block_size=1 << 16)


@torch.no_grad()
def prefill(case: Case, repeats: int):
    hidden = case.hf_input(PREFILL_SEQS, PREFILL_LEN)
    packed = hidden.reshape(PREFILL_SEQS * PREFILL_LEN, -1)
    common = meta([PREFILL_LEN] * PREFILL_SEQS, [0] * PREFILL_SEQS)
    check = case.ours(packed, common).view(PREFILL_SEQS, PREFILL_LEN, -1)
    assert (check - case.hf(hidden)).abs().max() < 1e-4
    # transformers saves the state in a fresh cache, as generate's prefill does
    return side_by_side(lambda: case.hf(hidden, cache=DynamicCache(config=case.config)),
                        lambda: case.ours(packed, common), repeats)


@torch.no_grad()
def decode(case: Case, repeats: int):
    prompt = case.hf_input(DECODE_BATCH, DECODE_CONTEXT)
    cache = DynamicCache(config=case.config)
    case.hf(prompt, cache=cache)
    case.ours(prompt.reshape(DECODE_BATCH * DECODE_CONTEXT, -1), meta([DECODE_CONTEXT] * DECODE_BATCH, [0] * DECODE_BATCH))
    step = case.hf_input(DECODE_BATCH, 1)
    packed = step.reshape(DECODE_BATCH, -1)
    common = meta([1] * DECODE_BATCH, [DECODE_CONTEXT] * DECODE_BATCH)
    # both keep stepping from their own state: each call is one real decode step
    return side_by_side(lambda: case.hf(step, cache=cache), lambda: case.ours(packed, common), repeats)


@torch.no_grad()
def torch_against_cpu(dtype: torch.dtype, repeats: int) -> None:
    """short_conv_torch against short_conv_cpu, each on its own copy of the same pool (--cpu)."""
    env, slots = simulate("cpu"), 64
    print(f"short_conv_torch against short_conv_cpu, L_cache {WIDTH}, {str(dtype).removeprefix('torch.')}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads; medians of {repeats} alternating calls, us; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| hidden | step | short_conv_torch | short_conv_cpu | speed-up | max abs difference |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for hidden in (256, HIDDEN):
        spec = ShortConvSpec(hidden_size=hidden, conv_width=WIDTH, dtype=str(dtype).removeprefix("torch."))
        g = torch.Generator().manual_seed(hidden)
        weights = ShortConvWeights((torch.randn(hidden, WIDTH, generator=g) * 0.5).to(dtype), None)
        start = torch.randn(slots, hidden, WIDTH - 1, generator=g).to(dtype)
        order = torch.randperm(slots, generator=g)[:DECODE_BATCH].tolist()
        steps = {f"decode, batch {DECODE_BATCH}": meta([1] * DECODE_BATCH, [DECODE_CONTEXT] * DECODE_BATCH, order),
                 "prefill 4 x 64": meta([64] * 4, [0] * 4, order[:4])}
        for name, common in steps.items():
            bcx = torch.randn(common.num_tokens, 3 * hidden, generator=g).to(dtype)
            B, C, x = bcx.chunk(3, dim=1)
            sides = []
            for backend in (ShortConvTorch, ShortConvCpu):
                build, impl = backend.builder(spec, env), build_impl(backend, spec, env, "bench.conv")
                pool = {"conv": start.clone()}
                sides.append(lambda build=build, impl=impl, pool=pool: impl.forward(B, C, x, weights, pool,
                                                                                     build(common)))
            diff = (sides[0]().float() - sides[1]().float()).abs().max().item()
            t_torch, t_cpu = side_by_side(*sides, repeats)
            print(f"| {hidden} | {name} | {1e3 * t_torch:.0f} | {1e3 * t_cpu:.0f} | {t_torch / t_cpu:.2f}x "
                  f"| {diff:.2g} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cpu", action="store_true", help="short_conv_torch against short_conv_cpu instead")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                        help="the layer's and its state's dtype, with --cpu (default float32)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.cpu:
        return torch_against_cpu(getattr(torch, args.dtype), args.repeats)
    if args.dtype != "float32":
        raise SystemExit("bench_shortconv: --dtype goes with --cpu (transformers' side runs float32)")
    rows = []
    for with_projections in (False, True):
        case = Case(with_projections)
        part = "layer" if with_projections else "mixer"
        for name, bench in ((f"prefill {PREFILL_SEQS} x {PREFILL_LEN}", prefill), (f"decode, batch {DECODE_BATCH}", decode)):
            hf_ms, ours_ms = bench(case, args.repeats)
            rows.append((f"{name} ({part})", hf_ms, ours_ms))
    print(f"short_conv, hidden {HIDDEN}, L_cache {WIDTH}, float32, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; medians of {args.repeats}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| case | transformers Lfm2ShortConv (ms) | short_conv_torch (ms) | speed-up |")
    print("| --- | ---: | ---: | ---: |")
    for name, hf_ms, ours_ms in rows:
        print(f"| {name} | {hf_ms:.3f} | {ours_ms:.3f} | {hf_ms / ours_ms:.2f}x |")


if __name__ == "__main__":
    main()
