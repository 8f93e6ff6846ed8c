"""The dense products on CPU in float32: torch's F.linear (``linear_torch``)
against oneDNN with the weight as loaded, packed once into oneDNN's blocked
layout (``linear_onednn``), or stored transposed (column-major, how
``embedding_onednn`` keeps a tied table), and mixboard-cpu's kernel on
panels (``linear_cpu``, what the runner chooses on CPU in float32), on the
shapes of the runner benchmark's llama, side by side.

    python benchmarks/runner/bench_linear.py [--threads 2] [--rounds 5]

The backends' rows go through their impls as the runner calls them
(``make_impl``, ``load``, ``forward``). Each weight is one of enough copies
to overflow the last-level cache, so a decode product streams its weight
from memory as it does in a model step. The variants take turns,
``--rounds`` times; each keeps its best time (this machine's speed drifts
within minutes).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from mixboard import LinearSpec, LinearWeights, simulate
from mixboard_cpu.compiled import INSTALL_HINT, PANELS, kernel_unusable
from mixboard_cpu.linear_backend import LinearCpu
from mixboard_cpu.linear_onednn_backend import LinearOneDnn
from mixboard_cpu.onednn import product

SHAPES = [("qkv", 1024, 512), ("o", 512, 512), ("gate_up", 3072, 512), ("down", 512, 1536),
          ("lm_head", 32000, 512)]


def bench(fn, repeats):
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def impl(backend, weight):
    spec = LinearSpec(in_features=weight.shape[1], out_features=weight.shape[0])
    made = backend.make_impl(spec, simulate("cpu"))
    made.load(LinearWeights(weight=weight, bias=None))
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if kernel_unusable(PANELS):
        raise SystemExit(f"{PANELS} is not built ({INSTALL_HINT})")
    print("| weight (out x in) | rows | F.linear | oneDNN as loaded | oneDNN packed | oneDNN column-major | panels |"
          " panels speed-up over packed |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, out_features, in_features in SHAPES:
        copies = max(1, int(256e6 // (out_features * in_features * 4)))
        weights = [torch.randn(out_features, in_features) for _ in range(copies)]
        packed = [impl(LinearOneDnn, w) for w in weights]
        columns = [w.t().contiguous().t() for w in weights]
        paneled = [impl(LinearCpu, w) for w in weights]
        for rows in (1, 16, 256):
            x = torch.randn(rows, in_features)
            turn = iter(range(10 ** 9))
            pick = lambda seq: seq[next(turn) % copies]  # noqa: E731
            variants = [lambda: F.linear(x, pick(weights)),
                        lambda: product(x, pick(weights), None),
                        lambda: pick(packed).forward(x),
                        lambda: product(x, pick(columns), None),
                        lambda: pick(paneled).forward(x)]
            repeats = 20 if rows < 256 else 4
            best = [float("inf")] * len(variants)
            for _ in range(args.rounds):
                best = [min(b, bench(fn, repeats)) for b, fn in zip(best, variants)]
            print(f"| {name} ({out_features} x {in_features}) | {rows} | "
                  + " | ".join(f"{t * 1e3:.3f} ms" for t in best) + f" | {best[2] / best[4]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
