"""Registry cost: a fresh process to the first plan of a 1,000-layer hybrid,
and a warm re-plan of the same layers.

    python benchmarks/registry/bench_registry.py [--runs 15] [--layers 1000] [--mixers-only] [--json]

Each of the 1,000 blocks plans as a model's does: its mixer (attention,
mamba2, short_conv, mamba1 repeating) and its dense ops (two norms, the
mixer's projections, the MLP's gated product and down projection), plus
the embedding, rotary, final norm and argmax: ~7,000 planned layers.
``--mixers-only`` plans the mixers alone (the measure before the dense kinds).

Fresh process: wall time of ``python -c <import torch; import mixboard;
load plugins; plan>`` minus wall time of ``python -c <import torch>`` (and
minus the child's making of the synthetic declarations, the model's part),
medians over --runs alternating runs (both pay the interpreter start; the
difference is what mixboard adds). The child also reports its own breakdown
after ``import torch``. Uses the plugins installed in this environment.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import time

def model_layers(n: int, dense: bool) -> list:
    """(name, kind, spec) of n blocks, as a model declares them."""
    from mixboard import (ArgmaxSpec, AttentionSpec, EmbeddingSpec, LinearSpec, Mamba1Spec, Mamba2Spec, RMSNormSpec,
                          RotarySpec, ShortConvSpec)

    hidden = 1024
    mixers = [("attn", "attention", AttentionSpec(num_heads=16, num_kv_heads=4, head_size=64), 1536, 1024),
              ("mamba", "mamba2", Mamba2Spec(num_heads=32, head_dim=64), 6208, 2048),
              ("conv", "short_conv", ShortConvSpec(hidden_size=hidden), 3072, 1024),
              ("mixer", "mamba1", Mamba1Spec(d_inner=2048, dt_rank=64), 4096, 2048)]
    norm = RMSNormSpec(hidden_size=hidden)
    gate_up, down = LinearSpec(in_features=hidden, out_features=2816, gated=True), LinearSpec(in_features=2816,
                                                                                            out_features=hidden)
    projections = {name: (LinearSpec(in_features=hidden, out_features=o), LinearSpec(in_features=i, out_features=hidden))
                   for name, _, _, o, i in mixers}
    layers = [("model.embed_tokens", "embedding", EmbeddingSpec(embedding_dim=hidden, tied=True)),
              ("model.rotary_emb", "rotary", RotarySpec())] if dense else []
    for i in range(n):
        name, kind, spec, _, _ = mixers[i % 4]
        block = f"model.layers.{i}"
        if dense:
            layers.append((f"{block}.input_layernorm", "rms_norm", norm))
            layers.append((f"{block}.{name}.in_proj", "linear", projections[name][0]))
        layers.append((f"{block}.{name}", kind, spec))
        if dense:
            layers += [(f"{block}.{name}.out_proj", "linear", projections[name][1]),
                       (f"{block}.post_norm", "rms_norm", norm), (f"{block}.mlp.gate_up_proj", "linear", gate_up),
                       (f"{block}.mlp.down_proj", "linear", down)]
    if dense:
        layers += [("model.norm", "rms_norm", norm), ("argmax", "argmax", ArgmaxSpec())]
    return layers


CHILD = r"""
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import mixboard
t2 = time.perf_counter()
registry = mixboard.get_registry()
t3 = time.perf_counter()
layers = model_layers(LAYERS, DENSE)  # the model's declarations: the benchmark's, not the registry's cost
t4 = time.perf_counter()
plan = registry.plan(layers)
t5 = time.perf_counter()
print(json.dumps({"torch": t1 - t0, "import": t2 - t1, "load": t3 - t2, "decls": t4 - t3, "plan": t5 - t4,
                  "after_torch": t5 - t1 - (t4 - t3), "groups": len(plan.groups), "plugins": len(registry.plugins),
                  "planned": len(plan.layers)}))
"""


# Children cache bytecode as a user's Python does (some sandboxes set
# PYTHONDONTWRITEBYTECODE, which makes every import compile its source).
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, env=CHILD_ENV)
    return time.perf_counter() - start


def fresh_process(runs: int, layers: int, dense: bool) -> dict:
    # the child defines model_layers itself: importing this script would add its imports to the timing
    child = (CHILD.replace("import mixboard\n", "import mixboard\n" + inspect.getsource(model_layers), 1)
             .replace("LAYERS", str(layers)).replace("DENSE", str(dense)))
    wall(child)  # warm the page cache and the bytecode caches once
    torch_only, full, inner = [], [], []
    for _ in range(runs):
        torch_only.append(wall("import torch"))
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", child], check=True, capture_output=True, text=True, env=CHILD_ENV)
        inner.append(json.loads(out.stdout))
        full.append(time.perf_counter() - start - inner[-1]["decls"])
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
        "planned": inner[0]["planned"],
    }


def warm_replan(layers_n: int, dense: bool, repeats: int = 200) -> dict:
    from mixboard import Registry, get_registry
    from mixboard.plugins import load

    layers = model_layers(layers_n, dense)
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
    parser.add_argument("--mixers-only", action="store_true", help="plan the mixers alone, not their dense ops")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    dense = not args.mixers_only
    result = {"layers": args.layers, **fresh_process(args.runs, args.layers, dense),
              **warm_replan(args.layers, dense)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    ms = lambda s: f"{s * 1e3:.2f} ms"  # noqa: E731
    print(f"| measure ({args.layers} blocks, {result['planned']} planned layers, {result['plugins']} plugins, "
          f"{result['groups']} groups) | median |")
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
