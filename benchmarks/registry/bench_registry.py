"""Registry cost: a fresh process to the first plan of a 1,000-layer hybrid,
and a warm re-plan of the same layers.

    python benchmarks/registry/bench_registry.py [--runs 15] [--layers 1000] [--json]

Fresh process: wall time of ``python -c <import torch; import mixboard;
load plugins; plan>`` minus wall time of ``python -c <import torch>``,
medians over --runs alternating runs (both pay the interpreter start; the
difference is what mixboard adds). The child also reports its own breakdown
after ``import torch``. Uses the plugins installed in this environment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import mixboard
from mixboard import AttentionSpec, Mamba1Spec, Mamba2Spec, ShortConvSpec
t2 = time.perf_counter()
registry = mixboard.get_registry()
t3 = time.perf_counter()
PATTERN = [("attn", "attention", AttentionSpec(num_heads=16, num_kv_heads=4, head_size=64)),
           ("mamba", "mamba2", Mamba2Spec(num_heads=32, head_dim=64)),
           ("conv", "short_conv", ShortConvSpec(hidden_size=1024)),
           ("mixer", "mamba1", Mamba1Spec(d_inner=2048, dt_rank=64))]
layers = [(f"model.layers.{i}.{PATTERN[i % 4][0]}", PATTERN[i % 4][1], PATTERN[i % 4][2]) for i in range(LAYERS)]
plan = registry.plan(layers)
t4 = time.perf_counter()
print(json.dumps({"torch": t1 - t0, "import": t2 - t1, "load": t3 - t2, "plan": t4 - t3,
                  "after_torch": t4 - t1, "groups": len(plan.groups), "plugins": len(registry.plugins)}))
"""


# Children cache bytecode as a user's Python does (some sandboxes set
# PYTHONDONTWRITEBYTECODE, which makes every import compile its source).
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, env=CHILD_ENV)
    return time.perf_counter() - start


def fresh_process(runs: int, layers: int) -> dict:
    child = CHILD.replace("LAYERS", str(layers))
    wall(child)  # warm the page cache and the bytecode caches once
    torch_only, full, inner = [], [], []
    for _ in range(runs):
        torch_only.append(wall("import torch"))
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", child], check=True, capture_output=True, text=True, env=CHILD_ENV)
        full.append(time.perf_counter() - start)
        inner.append(json.loads(out.stdout))
    med = lambda key: statistics.median(r[key] for r in inner)  # noqa: E731
    return {
        "wall_import_torch_s": statistics.median(torch_only),
        "wall_full_s": statistics.median(full),
        "wall_mixboard_s": statistics.median(full) - statistics.median(torch_only),
        "in_process_after_torch_s": med("after_torch"),
        "in_process_import_mixboard_s": med("import"),
        "in_process_load_plugins_s": med("load"),
        "in_process_first_plan_s": med("plan"),
        "plugins": inner[0]["plugins"],
        "groups": inner[0]["groups"],
    }


def warm_replan(layers_n: int, repeats: int = 200) -> dict:
    from mixboard import AttentionSpec, Mamba1Spec, Mamba2Spec, ShortConvSpec, Registry, get_registry
    from mixboard.plugins import load

    pattern = [("attn", "attention", AttentionSpec(num_heads=16, num_kv_heads=4, head_size=64)),
               ("mamba", "mamba2", Mamba2Spec(num_heads=32, head_dim=64)),
               ("conv", "short_conv", ShortConvSpec(hidden_size=1024)),
               ("mixer", "mamba1", Mamba1Spec(d_inner=2048, dt_rank=64))]
    layers = [(f"model.layers.{i}.{pattern[i % 4][0]}", pattern[i % 4][1], pattern[i % 4][2]) for i in range(layers_n)]
    registry = get_registry()
    registry.plan(layers)

    def timed(fn):
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    overrides = registry.parse_overrides("attention=sdpa,model.layers.1*.mamba=mamba2_torch")
    return {
        "warm_replan_s": timed(lambda: registry.plan(layers)),
        "warm_replan_with_layer_rules_s": timed(lambda: registry.plan(layers, overrides=overrides)),
        "fingerprint_s": timed(lambda: registry.plan(layers).fingerprint),
        "cold_memo_plan_s": timed(lambda: Registry(load()).plan(layers)) if repeats else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--layers", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {"layers": args.layers, **fresh_process(args.runs, args.layers), **warm_replan(args.layers)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    ms = lambda s: f"{s * 1e3:.2f} ms"  # noqa: E731
    print(f"| measure ({args.layers} layers, {result['plugins']} plugins, {result['groups']} groups) | median |")
    print("| --- | --- |")
    rows = [
        ("fresh process, wall, minus `import torch` (target < 50 ms)", result["wall_mixboard_s"]),
        ("  in process after `import torch`: import mixboard", result["in_process_import_mixboard_s"]),
        ("  in process: scan entry points and load plugins", result["in_process_load_plugins_s"]),
        ("  in process: first plan", result["in_process_first_plan_s"]),
        ("warm re-plan (target < 2 ms)", result["warm_replan_s"]),
        ("warm re-plan with layer-pattern rules", result["warm_replan_with_layer_rules_s"]),
        ("warm re-plan + fingerprint", result["fingerprint_s"]),
        ("plan with a new registry (load plugins + cold memo)", result["cold_memo_plan_s"]),
        ("for scale: `import torch`, wall", result["wall_import_torch_s"]),
    ]
    for name, value in rows:
        print(f"| {name} | {ms(value)} |")


if __name__ == "__main__":
    main()
