"""mamba2_torch against transformers' Mamba2Mixer (its PyTorch path), side by side.

Run by hand (not a test):  python benchmarks/kernels/bench_mamba2.py [--repeats 7] [--threads 2]

Both sides run the whole mixer with the same weights: transformers' module
as is, and ours as the module's in_proj -> mamba2_torch -> out_proj; the
projections are also timed alone, so the table shows the part of the module
mamba2_torch replaces (conv, scan, gated norm) against mamba2_torch. Prefill:
4 sequences of 1,024 new tokens (transformers: one [4, 1024] batch; ours: the
same tokens packed, states written to slots). Decode: single steps at batch
16 after a 64-token prompt, transformers through its cache (conv and SSM
states carried, no recomputation), ours through the state pools. float32,
torch.set_num_threads(2) unless --threads; the fastest of the repeats is
reported, and the outputs of the two are compared so a fast wrong answer
cannot pass.

    python benchmarks/kernels/bench_mamba2.py --cpu-decode [--rounds 15] [--threads 1]

measures instead ``mamba2_cpu``'s decode step as an engine runs it: 16
sequences whose slots are scattered over pools laid in larger pages (vLLM's
hybrid cache, ``stride(0)`` past a record: the conformance kit's pages),
z, xBC and dt as strided column slices of one in_proj output. Its decodes'
state update in C (``_decode.c``, in place) against the same backend with
``mamba2_torch``'s update (``ssd_decode``: index_select, three passes,
index_copy_), the update ``mamba2_cpu`` ran before ``_decode.c``; both
sides run the same conv and gated-norm kernels. Alternating in rounds on
equal states, outputs compared; per-call medians of each round, reported
as the median and range over rounds, with the load average before and after.

    python benchmarks/kernels/bench_mamba2.py --cpu-decode --dtype bfloat16

the same step in a bfloat16 layer laid out as vLLM lays it on a CPU with
AVX512-BF16 (conv state bfloat16, SSM state float32): ``mamba2_torch``
(what served it before ``mamba2_cpu`` took bfloat16) against ``mamba2_cpu``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

import transformers  # noqa: F401  (imported before anything could stub mamba_ssm)
from transformers import Mamba2Config
from transformers.cache_utils import DynamicCache
from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

from mixboard import CommonBatchMetadata, Mamba2Spec, Mamba2Weights, simulate
from mixboard.kinds.mamba2 import mamba2_state
from mixboard.ops.checks import build_impl
from mixboard.testing import allocate_state
from mixboard.testing.conformance.pages import allocate_in_pages
from mixboard_mamba2.torch_backend import Mamba2Torch

HIDDEN, EXPAND, HEAD_DIM, D_STATE, N_GROUPS, D_CONV, CHUNK = 1024, 2, 64, 128, 1, 4, 256


def make_mixer() -> Mamba2Mixer:
    heads = HIDDEN * EXPAND // HEAD_DIM
    config = Mamba2Config(hidden_size=HIDDEN, expand=EXPAND, num_heads=heads, head_dim=HEAD_DIM, state_size=D_STATE,
                          n_groups=N_GROUPS, conv_kernel=D_CONV, chunk_size=CHUNK, num_hidden_layers=1,
                          vocab_size=16)
    mixer = Mamba2Mixer(config, layer_idx=0).eval()
    return mixer, config


class Ours:
    """The module's projections around mamba2_torch."""

    def __init__(self, mixer: Mamba2Mixer):
        self.m = mixer
        self.spec = Mamba2Spec(num_heads=mixer.num_heads, head_dim=mixer.head_dim, d_state=mixer.ssm_state_size,
                               n_groups=mixer.n_groups, d_conv=mixer.conv_kernel_size, chunk_size=mixer.chunk_size,
                               norm_eps=mixer.norm.variance_epsilon)
        self.weights = Mamba2Weights(conv_weight=mixer.conv1d.weight[:, 0], conv_bias=mixer.conv1d.bias,
                                     dt_bias=mixer.dt_bias, A=-torch.exp(mixer.A_log.float()), D=mixer.D,
                                     norm_weight=mixer.norm.weight)
        env = simulate("cpu")
        self.impl = build_impl(Mamba2Torch, self.spec, env, "bench.mixer")
        self.build = Mamba2Torch.builder(self.spec, env)

    def state(self, slots: int):
        return allocate_state(mamba2_state(self.spec), slots)

    def project(self, hidden: torch.Tensor):
        m = self.m
        return m.in_proj(hidden).split([m.intermediate_size, m.conv_dim, m.num_heads], dim=-1)

    def backend(self, zxbcdt, state, meta) -> torch.Tensor:
        return self.impl.forward(*zxbcdt, self.weights, state, meta)

    def __call__(self, hidden: torch.Tensor, state, meta) -> torch.Tensor:
        return self.m.out_proj(self.backend(self.project(hidden), state, meta))


def fastest_ms(fns: dict, repeats: int) -> dict[str, float]:
    """The fastest wall time of each function over the repeats, run in turn so that all see the same
    machine load; on a shared machine the fastest run is the one least disturbed by others."""
    for fn in fns.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: min(t) for name, t in times.items()}


def timed(ours: Ours, mixer_call, tokens_in: torch.Tensor, state, meta, repeats: int):
    """transformers' mixer, ours, the shared projections alone, and our backend alone (ms per call)."""
    packed = tokens_in.reshape(-1, HIDDEN)
    zxbcdt = ours.project(packed)
    y = ours.backend(zxbcdt, state, meta)

    return fastest_ms({
        "theirs": mixer_call,
        "ours": lambda: ours(packed, state, meta),
        "projections": lambda: (ours.m.in_proj(packed), ours.m.out_proj(y)),
        "backend": lambda: ours.backend(zxbcdt, state, meta),
    }, repeats)


def bench_prefill(mixer, config, ours, repeats: int, seqs: int = 4, length: int = 1024):
    hidden = torch.randn(seqs, length, HIDDEN)
    meta = ours.build(CommonBatchMetadata.build([length] * seqs, [0] * seqs, list(range(seqs)), [[]] * seqs, 16))
    state = ours.state(seqs)

    def theirs():
        return mixer(hidden, cache=DynamicCache(config=config))

    err = (theirs().reshape(-1, HIDDEN) - ours(hidden.reshape(-1, HIDDEN), state, meta)).abs().max().item()
    return timed(ours, theirs, hidden, state, meta, repeats), seqs * length, err


def bench_decode(mixer, config, ours, repeats: int, batch: int = 16, prompt: int = 64):
    prompt_hidden = torch.randn(batch, prompt, HIDDEN)
    cache = DynamicCache(config=config)
    mixer(prompt_hidden, cache=cache)
    state = ours.state(batch)
    meta = ours.build(CommonBatchMetadata.build([prompt] * batch, [0] * batch, list(range(batch)), [[]] * batch, 16))
    ours(prompt_hidden.reshape(-1, HIDDEN), state, meta)
    decode_meta = ours.build(CommonBatchMetadata.build([1] * batch, [prompt] * batch, list(range(batch)),
                                                       [[]] * batch, 16))
    token = torch.randn(batch, 1, HIDDEN)
    err = (mixer(token, cache=cache)[:, 0] - ours(token[:, 0], state, decode_meta)).abs().max().item()
    # both keep stepping the same token: each step reads and writes the states, as in generation
    return timed(ours, lambda: mixer(token, cache=cache), token, state, decode_meta, repeats), batch, err


CPU_DECODE_SHAPES = {  # name: (heads, head_dim, d_state, n_groups)
    "vLLM profile (GraniteMoeHybrid, hidden 256)": (8, 64, 16, 1),
    "runner ~40 M mamba2 (hidden 512)": (16, 64, 64, 1),
    "this file's shape (hidden 1024)": (32, 64, 128, 1),
}


def bench_cpu_decode(shape, rounds: int, dtype: str, batch: int = 16, records: int = 64, reps: int = 50):
    """mamba2_cpu's decode step, its state update in C against mamba2_torch's (float32), or mamba2_cpu
    against mamba2_torch (bfloat16): see the docstring."""
    from mixboard_mamba2.cpu_backend import Mamba2Cpu
    from mixboard_mamba2.torch_backend import Mamba2Torch
    from mixboard_mamba2.torch_impl import Mamba2TorchImpl

    H, P, N, G = shape
    layout = dict(state_dtype="float32", conv_state_dtype="bfloat16") if dtype == "bfloat16" else {}
    spec = Mamba2Spec(num_heads=H, head_dim=P, d_state=N, n_groups=G, d_conv=D_CONV, dtype=dtype, **layout)
    gen = torch.Generator().manual_seed(0)
    weights = Mamba2Weights(conv_weight=torch.randn(spec.conv_dim, D_CONV, generator=gen) * 0.3,
                            conv_bias=torch.randn(spec.conv_dim, generator=gen) * 0.1,
                            dt_bias=torch.randn(H, generator=gen) * 0.5 - 2.0,
                            A=-torch.exp(torch.rand(H, generator=gen) * 2.0), D=torch.randn(H, generator=gen),
                            norm_weight=1.0 + 0.1 * torch.randn(spec.d_inner, generator=gen))
    torch_dtype = getattr(torch, dtype)
    if dtype != "float32":  # the checkpoint's weights in its dtype; A stays float32, as vLLM keeps it
        weights = weights.replace(**{f: getattr(weights, f).to(torch_dtype)
                                     for f in ("conv_weight", "conv_bias", "dt_bias", "D", "norm_weight")})
    proj = torch.randn(batch, spec.d_inner + spec.conv_dim + H, generator=gen)  # one in_proj output, split
    z, xBC, dt = proj.to(torch_dtype).split([spec.d_inner, spec.conv_dim, H], dim=-1)
    env = simulate("cpu")
    slots = random.Random(0).sample(range(records), batch)  # as an engine hands them out: in no order
    meta = Mamba2Cpu.builder(spec, env)(CommonBatchMetadata.build([1] * batch, [64] * batch, slots, [[]] * batch, 16))
    after = build_impl(Mamba2Cpu, spec, env, "bench.mixer")
    if dtype == "float32":
        before = build_impl(Mamba2Cpu, spec, env, "bench.mixer")
        before._decodes = Mamba2TorchImpl._decodes.__get__(before)  # mamba2_cpu as it was: mamba2_torch's update
    else:
        before = build_impl(Mamba2Torch, spec, env, "bench.mixer")  # what served bfloat16 before
    states = {}
    for name in ("before", "after"):
        states[name], _ = allocate_in_pages(mamba2_state(spec), records, 16, "cpu")
        for pool in states[name].values():
            pool.copy_(torch.randn(pool.shape, generator=torch.Generator().manual_seed(1)))
    impls = {"before": before, "after": after}
    outs = {name: impls[name].forward(z, xBC, dt, weights, states[name], meta) for name in impls}
    err = (outs["before"].float() - outs["after"].float()).abs().max().item()
    limit = 1e-4 if dtype == "float32" else 3e-2 * outs["before"].float().abs().max().item()  # bfloat16: an ulp or so
    assert err < limit, f"{shape}: the two sides disagree by {err}"
    times: dict[str, list[float]] = {name: [] for name in impls}
    for r in range(rounds):
        for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
            impl, state, per = impls[name], states[name], []
            for _ in range(reps):
                start = time.perf_counter()
                impl.forward(z, xBC, dt, weights, state, meta)
                per.append(time.perf_counter() - start)
            times[name].append(1e6 * statistics.median(per))
    return times, err


def cpu_decode_main(rounds: int, dtype: str) -> None:
    load = os.getloadavg()[0]
    layout = " (conv state bfloat16, SSM state float32)" if dtype == "bfloat16" else ""
    print(f"mamba2_cpu decode step, 16 sequences on scattered slots of pools in pages; {dtype}{layout}, "
          f"{torch.get_num_threads()} thread(s), torch {torch.__version__}; {rounds} rounds alternating, "
          f"each the median of 50 calls; us: median (range over rounds)\n")
    sides = (("before: mamba2_torch's update", "after: _decode.c") if dtype == "float32"
             else ("mamba2_torch", "mamba2_cpu"))
    print(f"| layer shape | heads x head_dim, d_state, groups | {sides[0]} | {sides[1]} | speed-up | max abs diff |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name, shape in CPU_DECODE_SHAPES.items():
        times, err = bench_cpu_decode(shape, rounds, dtype)
        b, a = (statistics.median(times[k]) for k in ("before", "after"))
        span = {k: f"{min(t):,.0f}-{max(t):,.0f}" for k, t in times.items()}
        print(f"| {name} | {shape[0]} x {shape[1]}, {shape[2]}, {shape[3]} | {b:,.0f} ({span['before']}) "
              f"| {a:,.0f} ({span['after']}) | {b / a:.2f}x | {err:.1e} |")
    print(f"\nload average (1 min): {load:.2f} before, {os.getloadavg()[0]:.2f} after")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="2, or 1 with --cpu-decode (a vLLM worker's)")
    parser.add_argument("--cpu-decode", action="store_true", help="mamba2_cpu's decode step before/after _decode.c")
    parser.add_argument("--rounds", type=int, default=15, help="with --cpu-decode")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="with --cpu-decode: bfloat16 compares mamba2_torch with mamba2_cpu in vLLM's layout")
    args = parser.parse_args()
    if args.dtype != "float32" and not args.cpu_decode:
        parser.error("--dtype bfloat16 goes with --cpu-decode (the transformers comparison runs float32)")
    torch.set_num_threads(args.threads or (1 if args.cpu_decode else 2))
    if args.cpu_decode:
        with torch.inference_mode():
            cpu_decode_main(args.rounds, args.dtype)
        return
    torch.manual_seed(0)
    mixer, config = make_mixer()
    ours = Ours(mixer)
    rows = []
    with torch.inference_mode():
        ms, tokens, err = bench_prefill(mixer, config, ours, args.repeats)
        rows.append(("prefill 4 x 1024", ms, tokens, err))
        ms, tokens, err = bench_decode(mixer, config, ours, 5 * args.repeats)  # short: more samples
        rows.append(("decode step, batch 16", ms, tokens, err))
    print(f"mamba2: hidden {HIDDEN}, {mixer.num_heads} heads x {HEAD_DIM}, d_state {D_STATE}, n_groups {N_GROUPS}, "
          f"d_conv {D_CONV}, chunk {CHUNK}; float32, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"fastest of {args.repeats} (prefill) and {5 * args.repeats} (decode)\n")
    print("| case | transformers Mamba2Mixer (ms) | in_proj + mamba2_torch + out_proj (ms) | speed-up "
          "| transformers minus projections (ms) | mamba2_torch alone (ms) | speed-up | max abs diff |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, ms, tokens, err in rows:
        inner = ms["theirs"] - ms["projections"]
        print(f"| {name} | {ms['theirs']:.1f} | {ms['ours']:.1f} | {ms['theirs'] / ms['ours']:.2f}x "
              f"| {inner:.1f} | {ms['backend']:.1f} | {inner / ms['backend']:.2f}x | {err:.1e} |")


if __name__ == "__main__":
    main()
