"""The runner's projections: torch's F.linear against oneDNN with the weight
as loaded, packed once into oneDNN's blocked layout, or stored transposed
(column-major, what the runner did to a tied table before the panels), and
the runner's own kernel on panels (models/panels.py, what it runs now), on
the shapes of the runner benchmark's llama, side by side.

    python benchmarks/runner/bench_linear.py [--threads 2] [--rounds 5]

Each weight is one of enough copies to overflow the last-level cache, so a
decode product streams its weight from memory as it does in a model step.
The variants take turns, ``--rounds`` times; each keeps its best time (this
machine's speed drifts within minutes).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from mixboard_runner.models.panels import UNAVAILABLE, PanelLinear, to_panels

SHAPES = [("qkv", 1024, 512), ("o", 512, 512), ("gate_up", 3072, 512), ("down", 512, 1536),
          ("lm_head", 32000, 512)]


def bench(fn, repeats):
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if UNAVAILABLE:
        raise SystemExit(UNAVAILABLE)
    onednn = torch.ops.mkldnn._linear_pointwise
    print("| weight (out x in) | rows | F.linear | oneDNN as loaded | oneDNN packed | oneDNN column-major | panels |"
          " panels speed-up over packed |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, out_features, in_features in SHAPES:
        copies = max(1, int(256e6 // (out_features * in_features * 4)))
        weights = [torch.randn(out_features, in_features) for _ in range(copies)]
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, None) for w in weights]
        columns = [w.t().contiguous().t() for w in weights]
        paneled = [PanelLinear(in_features, out_features, to_panels(w), None) for w in weights]
        for rows in (1, 16, 256):
            x = torch.randn(rows, in_features)
            turn = iter(range(10 ** 9))
            pick = lambda seq: seq[next(turn) % copies]  # noqa: E731
            variants = [lambda: F.linear(x, pick(weights)),
                        lambda: onednn(x, pick(weights), None, "none", [], ""),
                        lambda: onednn(x, pick(packed), None, "none", [], ""),
                        lambda: onednn(x, pick(columns), None, "none", [], ""),
                        lambda: pick(paneled)(x)]
            repeats = 20 if rows < 256 else 4
            best = [float("inf")] * len(variants)
            for _ in range(args.rounds):
                best = [min(b, bench(fn, repeats)) for b, fn in zip(best, variants)]
            print(f"| {name} ({out_features} x {in_features}) | {rows} | "
                  + " | ".join(f"{t * 1e3:.3f} ms" for t in best) + f" | {best[2] / best[4]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
