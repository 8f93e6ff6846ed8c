"""mixboard's engine against transformers' generate, same checkpoints, one run.

    python benchmarks/runner/bench_runner.py [--models llama,mamba,...] [--batches 1,16]
                                             [--prompt 256] [--new 128] [--repeats N] [--with-onednn] [--json]

Each model type gets a random ~40 M-parameter checkpoint (hidden 512, vocab
32,000) written by transformers' save_pretrained. Each (engine, model, batch)
runs in a fresh subprocess so that peak memory (ru_maxrss) is its own.
Greedy decoding, ignoring EOS, float32, 2 threads. Both sides first warm up
on the whole batch (generate with two new tokens), so that neither times its
first touch of the memory a batch needs. Prefill is timed alone
(transformers: generate with one new token; mixboard: its prefill steps);
decode is the rest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHECKPOINTS = {
    "llama": "LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=8, "
             "num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048, tie_word_embeddings=True)",
    "mamba": "MambaConfig(vocab_size=32000, hidden_size=512, state_size=16, num_hidden_layers=16, expand=2)",
    "mamba2": "Mamba2Config(vocab_size=32000, hidden_size=512, num_heads=16, head_dim=64, expand=2, state_size=64, "
              "n_groups=1, num_hidden_layers=16, chunk_size=128, tie_word_embeddings=True)",
    "lfm2": "Lfm2Config(vocab_size=32000, hidden_size=512, intermediate_size=2304, num_hidden_layers=10, "
            "num_attention_heads=8, num_key_value_heads=4, layer_types=['conv','conv','full_attention']*3+['conv'], "
            "max_position_embeddings=2048)",
    "bamba": "BambaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=8, "
             "num_attention_heads=8, num_key_value_heads=4, attn_layer_indices=[3, 7], mamba_n_heads=16, "
             "mamba_d_head=64, mamba_d_state=64, mamba_expand=2, mamba_chunk_size=128, tie_word_embeddings=True)",
    # Granite 4's shape in small: Mamba-2 and attention blocks, 8 routed experts (top 2) beside a shared one
    "granitemoehybrid": "GraniteMoeHybridConfig(vocab_size=32000, hidden_size=512, intermediate_size=512, "
                        "shared_intermediate_size=1024, num_local_experts=8, num_experts_per_tok=2, num_hidden_layers=8, "
                        "layer_types=['mamba'] * 3 + ['attention'] + ['mamba'] * 3 + ['attention'], "
                        "num_attention_heads=8, num_key_value_heads=4, mamba_n_heads=16, mamba_d_head=64, "
                        "mamba_n_groups=1, mamba_d_state=64, mamba_expand=2, mamba_chunk_size=128, "
                        "position_embedding_type='rope', max_position_embeddings=2048, tie_word_embeddings=True)",
    # Jamba's block in small: Mamba1 layers with dt/B/C norms, attention on 2 of 8, 8 experts (top 2) every other layer
    "jamba": "JambaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1024, num_hidden_layers=8, "
             "attn_layer_period=4, attn_layer_offset=2, expert_layer_period=2, expert_layer_offset=1, num_experts=8, "
             "num_experts_per_tok=2, num_attention_heads=8, num_key_value_heads=4, mamba_d_state=16, mamba_d_conv=4, "
             "mamba_expand=2, mamba_dt_rank=32, use_mamba_kernels=False, max_position_embeddings=2048, "
             "tie_word_embeddings=True)",
    # Qwen3-Next in small: Gated DeltaNet on 3 of 4 layers, gated attention on the 4th, 8 experts (top 2) and a
    # shared expert on every layer (needs mixboard-gdn)
    "qwen3_next": "Qwen3NextConfig(vocab_size=32000, hidden_size=512, intermediate_size=1024, num_hidden_layers=8, "
                  "full_attention_interval=4, num_attention_heads=8, num_key_value_heads=2, head_dim=64, "
                  "linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64, "
                  "linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=512, "
                  "shared_expert_intermediate_size=512, decoder_sparse_step=1, max_position_embeddings=2048, "
                  "tie_word_embeddings=True)",
}
CLASSES = {"llama": "LlamaForCausalLM", "mamba": "MambaForCausalLM", "mamba2": "Mamba2ForCausalLM",
           "lfm2": "Lfm2ForCausalLM", "bamba": "BambaForCausalLM", "granitemoehybrid": "GraniteMoeHybridForCausalLM",
           "jamba": "JambaForCausalLM", "qwen3_next": "Qwen3NextForCausalLM"}

MAKE = """
import torch, transformers
from transformers import *
torch.manual_seed(0)
model = transformers.{cls}({config})
model.save_pretrained({path!r})
print(sum(p.numel() for p in model.parameters()))
"""

RUN_HF = """
import json, resource, time, torch, transformers
torch.set_num_threads({threads})
model = transformers.AutoModelForCausalLM.from_pretrained({path!r}, dtype=torch.float32).eval()
torch.manual_seed(1)
ids = torch.randint(0, 32000, ({batch}, {prompt}))
def gen(n):
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, pad_token_id=0)
    return time.perf_counter() - start, out
gen(2)  # warm-up
prefill, _ = gen(1)
total, out = gen({new})
decode_tokens = {batch} * ({new} - 1)
print(json.dumps({{"prefill_tok_s": {batch} * {prompt} / prefill, "decode_tok_s": decode_tokens / (total - prefill),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""

RUN_MIXBOARD = """
import json, resource, sys, time, torch
torch.set_num_threads({threads})
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams
torch.manual_seed(1)
ids = torch.randint(0, 32000, ({batch}, {prompt})).tolist()
engine = Engine({path!r}, cache_memory={cache}, max_batched_tokens={batch} * {prompt}, max_seqs={batch},
                backend={backend!r}, reuse_host_memory=True)  # as `mixboard run` does
engine.generate(ids, SamplingParams(max_tokens=2, ignore_eos=True))  # warm-up, the whole batch as transformers
engine.generate(ids, SamplingParams(max_tokens={new}, ignore_eos=True))
s = engine.stats
print(json.dumps({{"prefill_tok_s": s.prefill_tokens / s.prefill_s, "decode_tok_s": s.decode_tokens / s.decode_s,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def run(code: str, python: str = sys.executable) -> dict:
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def cache_bytes(path: str, batch: int, tokens: int) -> int:
    """State for exactly this workload (transformers' cache also grows only to what it needs)."""
    from mixboard import get_registry
    from mixboard.environment import detect
    from mixboard_runner.loader import build_model

    plan = get_registry().plan(build_model(path).layer_decls(), detect())
    per_token = sum(g.state_spec.record_bytes() * len(g.layers) for g in plan.groups if g.state_spec.layout == "paged")
    per_seq = sum(g.state_spec.record_bytes() * len(g.layers) for g in plan.groups if g.state_spec.layout != "paged")
    blocks = -(-tokens // 16) + 1
    return batch * (per_seq + blocks * 16 * per_token)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(CHECKPOINTS))
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each side, alternating; a row keeps each side's best speeds and its largest "
                             "peak memory (interference from a shared machine only ever slows a run down), and "
                             "with 2 or more the median and range of the speed-ups of runs side by side in time")
    parser.add_argument("--with-onednn", action="store_true",
                        help="also run mixboard with oneDNN's products (--backend linear=linear_onednn, what runs "
                             "where mixboard-cpu's kernels are not built), in turn with the other two")
    parser.add_argument("--baseline", metavar="PYTHON",
                        help="also run mixboard with this interpreter (a venv of another commit), in turn with the "
                             "others: before and after a change, side by side")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every run (default 2)")
    parser.add_argument("--skip-transformers", action="store_true",
                        help="with --baseline: time mixboard against its baseline only (transformers does not change)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.skip_transformers and not args.baseline:
        parser.error("--skip-transformers needs --baseline")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = str(Path(tmp) / name)
            params = int(subprocess.run([sys.executable, "-c", MAKE.format(cls=CLASSES[name], config=CHECKPOINTS[name],
                                                                          path=path)],
                                        capture_output=True, text=True, check=True).stdout.split()[-1])
            for batch in (int(b) for b in args.batches.split(",")):
                fmt = dict(path=path, batch=batch, prompt=args.prompt, new=args.new, threads=args.threads,
                           cache=cache_bytes(path, batch, args.prompt + args.new))
                hf_runs, mb_runs, onednn_runs, base_runs = [], [], [], []
                for _ in range(args.repeats):
                    if not args.skip_transformers:
                        hf_runs.append(run(RUN_HF.format(**fmt)))
                    mb_runs.append(run(RUN_MIXBOARD.format(**fmt, backend="")))
                    if args.with_onednn:
                        onednn_runs.append(run(RUN_MIXBOARD.format(**fmt, backend="linear=linear_onednn")))
                    if args.baseline:
                        base_runs.append(run(RUN_MIXBOARD.format(**fmt, backend=""), args.baseline))
                rows.append({"model": name, "params_m": params / 1e6, "batch": batch,
                             "transformers": _best(hf_runs) if hf_runs else None, "mixboard": _best(mb_runs)})
                if onednn_runs:
                    rows[-1]["mixboard_onednn"] = _best(onednn_runs)
                if base_runs:
                    rows[-1]["baseline"] = _best(base_runs)
                    rows[-1]["pairs_vs_baseline"] = [
                        {k: m[k] / b[k] for k in ("prefill_tok_s", "decode_tok_s")} for m, b in zip(mb_runs, base_runs)]
                if not args.json:
                    print(_row(rows[-1]), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


def _best(runs: list[dict]) -> dict:
    return {"prefill_tok_s": max(r["prefill_tok_s"] for r in runs), "decode_tok_s": max(r["decode_tok_s"] for r in runs),
            "peak_mb": max(r["peak_mb"] for r in runs), "runs": runs}


def _row(r) -> str:
    hf, mb = r["transformers"], r["mixboard"]
    if hf is None:  # --skip-transformers: this mixboard against the baseline's, each side's best, then the pairs
        base = r["baseline"]
        row = (f"| {r['model']} ({r['params_m']:.0f} M) | {r['batch']} | {base['prefill_tok_s']:.0f} | "
               f"{mb['prefill_tok_s']:.0f} | {base['decode_tok_s']:.0f} | {mb['decode_tok_s']:.0f} | "
               f"{base['peak_mb']:.0f} | {mb['peak_mb']:.0f} |")
        for key in ("prefill_tok_s", "decode_tok_s"):
            ratios = sorted(p[key] for p in r["pairs_vs_baseline"])
            row += f" {statistics.median(ratios):.3f} ({ratios[0]:.2f}-{ratios[-1]:.2f}) |"
        return row
    row = (f"| {r['model']} ({r['params_m']:.0f} M) | {r['batch']} | {hf['prefill_tok_s']:.0f} | {mb['prefill_tok_s']:.0f} | "
           f"{mb['prefill_tok_s'] / hf['prefill_tok_s']:.2f}x | {hf['decode_tok_s']:.0f} | {mb['decode_tok_s']:.0f} | "
           f"{mb['decode_tok_s'] / hf['decode_tok_s']:.2f}x | {hf['peak_mb']:.0f} | {mb['peak_mb']:.0f} |")
    if "mixboard_onednn" in r:  # the same engine with oneDNN's projections: prefill, decode, peak
        old = r["mixboard_onednn"]
        row += f" {old['prefill_tok_s']:.0f} | {old['decode_tok_s']:.0f} | {old['peak_mb']:.0f} |"
    if len(hf["runs"]) > 1:  # each repeat's two runs ran one after the other: their ratio, median (range)
        for key in ("prefill_tok_s", "decode_tok_s"):
            ratios = sorted(m[key] / h[key] for h, m in zip(hf["runs"], mb["runs"]))
            row += f" {statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}) |"
    if "baseline" in r:  # the baseline interpreter's mixboard: prefill, decode, peak; then this one's ratio to it
        base = r["baseline"]
        row += f" {base['prefill_tok_s']:.0f} | {base['decode_tok_s']:.0f} | {base['peak_mb']:.0f} |"
        for key in ("prefill_tok_s", "decode_tok_s"):
            ratios = sorted(p[key] for p in r["pairs_vs_baseline"])
            row += f" {statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}) |"
    return row


if __name__ == "__main__":
    main()
