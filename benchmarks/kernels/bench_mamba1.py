"""mamba1_torch against transformers' MambaMixer (its PyTorch path), side by
side in one process, float32. Run by hand:

    python benchmarks/kernels/bench_mamba1.py [--quick] [--threads 2] [--repeats 3]

Same weights and inputs on both sides, two comparisons per workload:

* whole mixer: MambaMixer.forward (in_proj, conv, scan, gate, out_proj)
  against in_proj + mamba1_torch + out_proj;
* the part the backend replaces: MambaMixer.forward with in_proj swapped for
  a module returning the precomputed projection and out_proj for Identity,
  against mamba1_torch's forward alone.

Prefill: 4 sequences of 1,024 tokens in one call (transformers gets a
[4, 1024] batch, we get them packed and ragged). Decode: one new token for
each of 16 sequences per step, after a short prompt; transformers runs its
cache path (DynamicCache: causal_conv1d_update and selective_state_update in
torch, no recomputation of the prompt). The two sides alternate and each
time is the best of ``--repeats`` (the least disturbed by other processes on
a shared machine). ``--clock cpu`` measures the process's CPU time instead
of wall time: steadier on a busy machine, meaningful with ``--threads 1``.
Prints a markdown table.

    python benchmarks/kernels/bench_mamba1.py --cpu-decode [--dtype bfloat16] [--rounds 9]

measures instead one decode step of 16 sequences on scattered slots of pools
laid in pages, as an engine runs it, one thread: ``mamba1_torch`` against
``mamba1_cpu`` in the layer's dtype (bfloat16: vLLM's layout on a CPU with
AVX512-BF16, conv state bfloat16 and SSM state float32), at Jamba's layer
shape (with its dt/B/C norms) and at this script's Mamba shape. Each round
alternates the sides, each the median of 50 calls; the table gives the
median and range over rounds, and the largest difference between the
outputs over the largest output.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch import nn

from mixboard import CommonBatchMetadata, Mamba1Spec, Mamba1Weights, simulate
from mixboard.kinds.mamba1 import mamba1_state
from mixboard.ops.checks import build_impl
from mixboard.testing import allocate_state
from mixboard_mamba1.torch_backend import Mamba1Torch

HIDDEN, D_STATE, D_CONV, DT_RANK = 1024, 16, 4, 64
PREFILL_SEQS, PREFILL_LEN = 4, 1024
DECODE_BATCH, DECODE_CONTEXT, DECODE_STEPS = 16, 32, 10


class Precomputed(nn.Module):
    """Stands in for in_proj: returns the projection computed beforehand."""

    def __init__(self, output: torch.Tensor):
        super().__init__()
        self.output = output

    def forward(self, hidden):
        return self.output


CLOCK = time.perf_counter


def best_of(repeats: int, *fns) -> list[float]:
    """Best seconds of each function over ``repeats`` rounds; the functions alternate within a round."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = CLOCK()
            fn()
            best[i] = min(best[i], CLOCK() - start)
    return best


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


CPU_DECODE_SHAPES = {  # name: (d_inner, d_state, d_conv, dt_rank, dt_bc_norms)
    "Jamba (hidden 256, vLLM lane's)": (512, 16, 4, 16, True),
    "Mamba (hidden 1024, above)": (2 * HIDDEN, D_STATE, D_CONV, DT_RANK, False),
}


def cpu_decode(rounds: int, dtype: torch.dtype, batch: int = 16, records: int = 64, reps: int = 50) -> None:
    """mamba1_torch against mamba1_cpu, one decode step (see the docstring)."""
    from mixboard.testing.conformance.pages import allocate_in_pages
    from mixboard_mamba1.cpu_backend import Mamba1Cpu

    torch.set_num_threads(1)
    name = str(dtype).removeprefix("torch.")
    layout = dict(state_dtype="float32", conv_state_dtype="bfloat16") if dtype == torch.bfloat16 else {}
    print(f"mamba1 decode step, {batch} sequences on scattered slots of pools in pages; {name}"
          f"{' (conv state bfloat16, SSM state float32)' if layout else ''}, 1 thread, {rounds} rounds, each the "
          f"median of {reps} calls, us; load average {os.getloadavg()[0]:.1f}\n")
    print(f"| layer | `mamba1_torch` {name} | `mamba1_cpu` {name} | speed-up | max difference / max output |")
    print("| --- | ---: | ---: | ---: | ---: |")
    env, g = simulate("cpu"), torch.Generator().manual_seed(0)
    for label, (DI, N, W, R, norms) in CPU_DECODE_SHAPES.items():
        spec = Mamba1Spec(d_inner=DI, d_state=N, d_conv=W, dt_rank=R, dt_bc_norms=norms, dtype=name, **layout)
        r = lambda *shape, s=0.3: (torch.randn(*shape, generator=g) * s).to(dtype)  # noqa: E731
        weights = Mamba1Weights(
            conv_weight=r(DI, W, s=0.5), conv_bias=r(DI, s=0.2), x_proj_weight=r(R + 2 * N, DI),
            dt_proj_weight=r(DI, R, s=0.5), dt_proj_bias=r(DI, s=1.0) - 2.0,
            A=-torch.exp(torch.randn(DI, N, generator=g)), D=r(DI, s=1.0),
            **({f"{p}_norm_weight": 1 + r(n) for p, n in (("dt", R), ("b", N), ("c", N))} if norms else {}))
        slots = torch.randperm(records, generator=g)[:batch].tolist()
        meta = CommonBatchMetadata.build([1] * batch, [40] * batch, slots, [[] for _ in slots], 16)
        x, z = r(batch, DI, s=1.0), r(batch, DI, s=1.0)
        sides, outs, initial = [], [], None
        for backend in (Mamba1Torch, Mamba1Cpu):
            state, _ = allocate_in_pages(mamba1_state(spec), records, 16, "cpu")
            initial = initial or {k: torch.randn(pool.shape, generator=g) * 0.1 for k, pool in state.items()}
            for k, pool in state.items():
                pool.copy_(initial[k])  # both sides from the same states
            impl, build = build_impl(backend, spec, env, "bench.mixer"), backend.builder(spec, env)
            outs.append(impl.forward(x, z, weights, dict(state), build(meta)))
            sides.append(lambda impl=impl, build=build, state=state: impl.forward(x, z, weights, state, build(meta)))
        times = [[], []]
        for i in range(rounds):
            for k in ((0, 1) if i % 2 == 0 else (1, 0)):
                calls = []
                for _ in range(reps):
                    start = time.perf_counter()
                    sides[k]()
                    calls.append(time.perf_counter() - start)
                times[k].append(1e6 * statistics.median(calls))
        t, c = (statistics.median(ts) for ts in times)
        span = [f"{min(ts):,.0f}-{max(ts):,.0f}" for ts in times]
        diff = ((outs[0].float() - outs[1].float()).abs().max() / outs[0].float().abs().max()).item()
        print(f"| {label}: {DI} channels, d_state {N}{', dt/B/C norms' if norms else ''} | {t:,.0f} ({span[0]}) "
              f"| {c:,.0f} ({span[1]}) | {t / c:.2f}x | {diff:.2g} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="prefill 4 x 256 tokens (transformers takes long at 1,024)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per measurement; the best is kept (default 3)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time (default) or this process's CPU time")
    parser.add_argument("--cpu-decode", action="store_true", help="mamba1_torch against mamba1_cpu, one decode step")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="with --cpu-decode: the layer's dtype (bfloat16 in vLLM's state layout)")
    parser.add_argument("--rounds", type=int, default=9, help="with --cpu-decode (default 9)")
    args = parser.parse_args()
    if args.dtype != "float32" and not args.cpu_decode:
        parser.error("--dtype goes with --cpu-decode (the transformers comparison runs float32)")
    if args.cpu_decode:
        with torch.inference_mode():
            return cpu_decode(args.rounds, getattr(torch, args.dtype))
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    prefill_len = 256 if args.quick else PREFILL_LEN

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from transformers import DynamicCache, MambaConfig
    from transformers.models.mamba.modeling_mamba import MambaMixer
    from transformers.utils import logging

    logging.set_verbosity_error()  # the "falling back to PyTorch" notice is the point here
    config = MambaConfig(hidden_size=HIDDEN, state_size=D_STATE, conv_kernel=D_CONV, expand=2, time_step_rank=DT_RANK,
                         num_hidden_layers=1)
    mixer = MambaMixer(config, layer_idx=0).eval()
    in_proj, out_proj = mixer.in_proj, mixer.out_proj
    spec = Mamba1Spec(d_inner=mixer.intermediate_size, d_state=D_STATE, d_conv=D_CONV, dt_rank=DT_RANK)
    weights = Mamba1Weights(conv_weight=mixer.conv1d.weight[:, 0, :], conv_bias=mixer.conv1d.bias,
                            x_proj_weight=mixer.x_proj.weight, dt_proj_weight=mixer.dt_proj.weight,
                            dt_proj_bias=mixer.dt_proj.bias, A=-torch.exp(mixer.A_log.float()), D=mixer.D)
    env = simulate("cpu")
    impl = build_impl(Mamba1Torch, spec, env, "bench.mixer")
    builder = Mamba1Torch.builder(spec, env)

    def metadata(query_lens, context_lens):
        slots = list(range(len(query_lens)))
        return builder(CommonBatchMetadata.build(query_lens, context_lens, slots, [[] for _ in slots], 16))

    def ours(hidden, meta, state):
        x, z = in_proj(hidden).chunk(2, dim=-1)
        return out_proj(impl.forward(x, z, weights, state, meta))

    def core_only(hidden):
        """The mixer with its projections swapped out, and our backend's inputs, for ``hidden``."""
        projected = in_proj(hidden)
        x, z = projected.reshape(-1, 2 * spec.d_inner).chunk(2, dim=-1)
        return projected, x, z

    rows = []
    with torch.no_grad():
        # ---- prefill
        n = PREFILL_SEQS
        hidden = torch.randn(n, prefill_len, HIDDEN)
        packed = hidden.reshape(-1, HIDDEN)
        meta = metadata([prefill_len] * n, [0] * n)
        state = allocate_state(mamba1_state(spec), n)
        mixer(hidden[:, :8])  # warm-up on a small input: a full transformers prefill is slow to repeat
        ours(packed[:64], metadata([16] * n, [0] * n), state)
        error = (ours(packed, meta, state).view_as(hidden) - mixer(hidden)).abs().max().item()
        hf, our = best_of(args.repeats, lambda: mixer(hidden), lambda: ours(packed, meta, state))
        projected, x, z = core_only(hidden)
        mixer.in_proj, mixer.out_proj = Precomputed(projected), nn.Identity()
        hf_core, our_core = best_of(args.repeats, lambda: mixer(hidden),
                                    lambda: impl.forward(x, z, weights, state, meta))
        mixer.in_proj, mixer.out_proj = in_proj, out_proj
        rows.append((f"prefill {n} x {prefill_len}", n * prefill_len, hf, our, hf_core, our_core, error))

        # ---- decode
        b = DECODE_BATCH
        prompt = torch.randn(b, DECODE_CONTEXT, HIDDEN)
        steps = torch.randn(DECODE_STEPS, b, 1, HIDDEN)
        cache = DynamicCache(config=config)
        mixer(prompt, cache=cache)
        state = allocate_state(mamba1_state(spec), b)
        ours(prompt.reshape(-1, HIDDEN), metadata([DECODE_CONTEXT] * b, [0] * b), state)
        metas = [metadata([1] * b, [DECODE_CONTEXT + i] * b) for i in range(DECODE_STEPS)]
        error = max((mixer(steps[i], cache=cache)[:, 0] - ours(steps[i, :, 0], metas[i], state)).abs().max().item()
                    for i in range(DECODE_STEPS))  # in lockstep, so both states stay equal

        def hf_decode():
            for i in range(DECODE_STEPS):
                mixer(steps[i], cache=cache)

        def our_decode():
            for i in range(DECODE_STEPS):
                ours(steps[i, :, 0], metas[i], state)

        hf, our = (t / DECODE_STEPS for t in best_of(args.repeats * 3, hf_decode, our_decode))
        cores = [core_only(steps[i]) for i in range(DECODE_STEPS)]

        def hf_decode_core():
            for i in range(DECODE_STEPS):
                mixer.in_proj = Precomputed(cores[i][0])
                mixer(steps[i], cache=cache)

        def our_decode_core():
            for i in range(DECODE_STEPS):
                impl.forward(cores[i][1], cores[i][2], weights, state, metas[i])

        mixer.out_proj = nn.Identity()
        hf_core, our_core = (t / DECODE_STEPS for t in best_of(args.repeats * 3, hf_decode_core, our_decode_core))
        mixer.in_proj, mixer.out_proj = in_proj, out_proj
        rows.append((f"decode step, batch {b}", b, hf, our, hf_core, our_core, error))
        build_s = best_of(20, lambda: metadata([1] * b, [DECODE_CONTEXT] * b))[0]

    print(f"mamba1, hidden {HIDDEN} (d_inner {spec.d_inner}), d_state {D_STATE}, d_conv {D_CONV}, dt_rank {DT_RANK}, "
          f"float32, torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} clock, best of {args.repeats}\n")
    print("| workload | transformers MambaMixer | in_proj + mamba1_torch + out_proj | speed-up "
          "| transformers, projections swapped out | mamba1_torch alone | speed-up | max abs diff |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, tokens, hf, our, hf_core, our_core, err in rows:
        print(f"| {name} | {ms(hf)} ({tokens / hf:,.0f} tok/s) | {ms(our)} ({tokens / our:,.0f} tok/s) | {hf / our:.1f}x "
              f"| {ms(hf_core)} | {ms(our_core)} | {hf_core / our_core:.1f}x | {err:.1e} |")
    print(f"\nCommonBatchMetadata.build + mamba1_torch's builder (once per step, shared by a group's layers): "
          f"{build_s * 1e6:.0f} us at batch {b}")


if __name__ == "__main__":
    main()
