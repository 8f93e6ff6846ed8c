"""moe_cpu against moe_torch (and transformers' Mixtral block), side by side in one run.

    python benchmarks/kernels/bench_moe.py [--rounds 7] [--threads 1]

One layer's forward, float32, on 1, 16 and 256 rows (a decode, a batch of
decodes, a prefill chunk), at two shapes: many small experts (hidden 1,536,
64 experts of 512, top 6: GraniteMoeHybrid's tiny) and a few large ones
(hidden 1,024, 8 experts of 3,584, top 2: Mixtral's proportions). The
routing is Mixtral's (softmax, top k, renormalized), so transformers'
MixtralSparseMoeBlock runs the same weights (its own parameters are the
tensors handed to the backends). Rounds alternate the three; each round
times the median of a few calls. Prints a markdown table of medians (us)
with the machine's load average: on a shared machine compare the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from mixboard import MoESpec, MoEWeights, simulate
from mixboard.ops.checks import build_impl
from mixboard.torch_ops.backends import MoETorch
from mixboard_cpu import MoECpu

SHAPES = {
    "64 x 512, top 6, hidden 1536": dict(hidden_size=1536, num_experts=64, intermediate_size=512, top_k=6),
    "8 x 3584, top 2, hidden 1024": dict(hidden_size=1024, num_experts=8, intermediate_size=3584, top_k=2),
}
ROWS = (1, 16, 256)


def per_call_us(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def hf_block(spec, weights):
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    block = MixtralSparseMoeBlock(MixtralConfig(hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
                                                num_local_experts=spec.num_experts, num_experts_per_tok=spec.top_k))
    block.gate.weight = torch.nn.Parameter(weights.router, requires_grad=False)
    block.experts.gate_up_proj = torch.nn.Parameter(weights.gate_up, requires_grad=False)
    block.experts.down_proj = torch.nn.Parameter(weights.down, requires_grad=False)
    return lambda x: block(x.unsqueeze(0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-transformers", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    env = simulate("cpu")
    print(f"threads {args.threads}, rounds {args.rounds}, load before {os.getloadavg()[0]:.1f}\n")
    print("| shape | rows | transformers | moe_torch | moe_cpu | moe_cpu over moe_torch |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, fields in SHAPES.items():
        spec = MoESpec(**fields, normalize_topk=True)
        g = torch.Generator().manual_seed(0)
        e, h, i = spec.num_experts, spec.hidden_size, spec.intermediate_size
        w = MoEWeights(router=torch.randn(e, h, generator=g) * h ** -0.5, router_bias=None, selection_bias=None,
                       gate_up=torch.randn(e, 2 * i, h, generator=g) * h ** -0.5,
                       down=torch.randn(e, h, i, generator=g) * i ** -0.5)
        impls = {}
        for backend in (MoETorch, MoECpu):
            impls[backend.name] = impl = build_impl(backend, spec, env, "bench.moe")
            impl.load(w)
        runs = {"moe_torch": impls["moe_torch"].forward, "moe_cpu": impls["moe_cpu"].forward}
        if not args.no_transformers:
            runs["transformers"] = hf_block(spec, w)
        for rows in ROWS:
            x = torch.randn(rows, h, generator=g)
            with torch.inference_mode():
                want = runs["moe_torch"](x)
                assert (runs["moe_cpu"](x) - want).abs().max() < 1e-4
                calls = 20 if rows == 1 else 5
                times = {name: [] for name in runs}
                for _ in range(args.rounds):
                    for name, fn in runs.items():
                        times[name].append(per_call_us(lambda: fn(x), calls))
            med = {name: statistics.median(t) for name, t in times.items()}
            hf = f"{med['transformers']:,.0f}" if "transformers" in med else "-"
            print(f"| {label} | {rows} | {hf} | {med['moe_torch']:,.0f} | {med['moe_cpu']:,.0f} | "
                  f"{med['moe_torch'] / med['moe_cpu']:.2f}x |", flush=True)
    print(f"\nload after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
