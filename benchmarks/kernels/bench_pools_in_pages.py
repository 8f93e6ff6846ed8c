"""The CPU backends on contiguous pools and on pools laid in larger pages, side by side in one run.

    python benchmarks/kernels/bench_pools_in_pages.py [--rounds 15] [--threads 1]

Inside an engine's hybrid cache (vLLM's) every pool is strided: a layer's
pools are slices of one page per record (a block, a slot), padded to the
largest layer's page, so ``stride(0)`` exceeds the record. The backends read
and write records in place there, their kernels given each pool's record
stride. This measures what that layout costs against mixboard's own
contiguous pools: one decode step at batch 16 per backend (sdpa_cpu with
1,024 cached tokens in blocks of 16; mamba1_cpu, mamba2_cpu and
short_conv_cpu at real sizes, slots handed out in no order). The pages are
the conformance kit's (``mixboard.testing.conformance.pages``: pools 64
bytes apart, pages ~1.5x their records). Each layout's forward runs
alternately with the other's, on the same inputs and state values; outputs
are compared, so a fast wrong answer cannot pass. Prints medians in us.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from mixboard import AttentionSpec, CommonBatchMetadata, Mamba1Spec, Mamba2Spec, ShortConvSpec, simulate
from mixboard.ops.checks import build_impl
from mixboard.testing import allocate_state
from mixboard.testing.conformance.inputs import draw_inputs
from mixboard.testing.conformance.kinds import ADAPTERS, cast_weights
from mixboard.testing.conformance.pages import allocate_in_pages
from mixboard_mamba1.cpu_backend import Mamba1Cpu
from mixboard_mamba2.cpu_backend import Mamba2Cpu
from mixboard_sdpa import SdpaCpuAttention
from mixboard_shortconv.cpu_backend import ShortConvCpu

BATCH, CONTEXT, BLOCK = 16, 1024, 16
BACKENDS = [  # (backend, kind, spec)
    (SdpaCpuAttention, "attention", AttentionSpec(num_heads=16, num_kv_heads=16, head_size=64)),
    (Mamba1Cpu, "mamba1", Mamba1Spec(d_inner=2048, d_state=16, d_conv=4, dt_rank=64)),
    (Mamba2Cpu, "mamba2", Mamba2Spec(num_heads=32, head_dim=64, d_state=128, n_groups=1, d_conv=4)),
    (ShortConvCpu, "short_conv", ShortConvSpec(hidden_size=1024, conv_width=3)),
]


def decode_step(records: int, paged: bool) -> CommonBatchMetadata:
    """BATCH decodes after CONTEXT tokens each; slots and blocks in no order (as an engine hands them out)."""
    rng = random.Random(0)
    per = -(-(CONTEXT + 1) // BLOCK)
    slots = [0] * BATCH if paged else rng.sample(range(records), BATCH)
    blocks = rng.sample(range(records), BATCH * per) if paged else []
    tables = [blocks[i * per:(i + 1) * per] for i in range(BATCH)]
    return CommonBatchMetadata.build([1] * BATCH, [CONTEXT] * BATCH, slots, tables, BLOCK)


def bench(backend, kind, spec, rounds: int, reps: int = 20) -> tuple[float, float]:
    env, adapter = simulate("cpu"), ADAPTERS[kind]
    state_spec = backend.state_spec(spec)
    records = BATCH * -(-(CONTEXT + 1) // BLOCK) + 1 if kind == "attention" else 4 * BATCH
    gen = torch.Generator().manual_seed(0)
    contiguous = allocate_state(state_spec, records, BLOCK)
    for pool in contiguous.values():
        pool.normal_(generator=gen)
    paged, _ = allocate_in_pages(state_spec, records, BLOCK, "cpu")
    weights = cast_weights(adapter.weights(spec, gen), torch.float32, "cpu") if adapter.weights else None
    inputs = draw_inputs(adapter.inputs(spec), BATCH, torch.float32, gen)
    common = decode_step(records, kind == "attention")
    impl, meta = build_impl(backend, spec, env, "bench"), backend.builder(spec, env)(common)
    runs = {}
    with torch.inference_mode():
        for name, state in (("contiguous", contiguous), ("in pages", paged)):
            saved = {n: p.clone() for n, p in contiguous.items()}

            def run(state=state, saved=saved):
                for n, pool in state.items():  # the same state values every call: a decode step, again
                    pool.copy_(saved[n])
                start = time.perf_counter()
                out = adapter.call(impl, inputs, weights, state, meta)
                return time.perf_counter() - start, out

            runs[name] = run
        a, b = runs["contiguous"]()[1], runs["in pages"]()[1]
        assert torch.equal(a, b), f"{backend.name}: the two layouts disagree"
        times = {name: [] for name in runs}
        for _ in range(rounds):
            for name, run in runs.items():
                times[name].append(statistics.median(run()[0] for _ in range(reps)))
    return tuple(1e6 * statistics.median(times[n]) for n in ("contiguous", "in pages"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"| backend | decode step, batch {BATCH} | contiguous pools | pools in pages | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for backend, kind, spec in BACKENDS:
        contiguous, paged = bench(backend, kind, spec, args.rounds)
        what = f"{CONTEXT} cached tokens" if kind == "attention" else "slots in no order"
        print(f"| `{backend.name}` | {what} | {contiguous:,.0f} us | {paged:,.0f} us | {paged / contiguous:.2f} |")


if __name__ == "__main__":
    main()
