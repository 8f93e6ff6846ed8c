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
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
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
