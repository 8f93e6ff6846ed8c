"""One decode step of attention at batch 16: sdpa_cpu's kernel (mixboard_sdpa._paged_decode) against
vLLM's own CPU attention kernel, on the same keys and values, one thread, CPU time per call, the
kernels taking turns. Run in the vLLM lane's venv:

    LD_PRELOAD=$PWD/.venv-vllm/lib/libiomp5.so .venv-vllm/bin/python benchmarks/vllm/bench_attention_kernel.py \\
        [--heads 4 --kv-heads 2 --head-size 32 --keys 160 --layers 3] [OTHER_BUILD.so ...]

--layers N gives each kernel N layers' pools taken in turn, as a model's layers evict each other's
from cache. Extra arguments are other builds of _paged_decode (a .so path each), timed beside the
installed one: how a kernel change is measured.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import statistics
import time

import torch


def load(path: str):
    loader = importlib.machinery.ExtensionFileLoader("_paged_decode", path)
    spec = importlib.util.spec_from_file_location("_paged_decode", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="*", help="other builds of _paged_decode (.so) to time beside the installed one")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-size", type=int, default=32)
    ap.add_argument("--keys", type=int, default=160, help="about this many cached keys per sequence (default 160)")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args()
    torch.set_num_threads(1)
    import vllm._custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    import mixboard_sdpa._paged_decode as installed

    B, H, KVH, D, bs = args.batch, args.heads, args.kv_heads, args.head_size, 32
    torch.manual_seed(0)
    lens = [args.keys + (i * 7) % 32 for i in range(B)]
    nblocks = [-(-n // bs) for n in lens]
    blocks = sum(nblocks) + 4
    order = torch.randperm(blocks).tolist()
    table = torch.zeros(B, max(nblocks), dtype=torch.int32)
    for i, n in enumerate(nblocks):
        table[i, :n] = torch.tensor(order[:n], dtype=torch.int32)
        order = order[n:]
    seq = torch.tensor(lens, dtype=torch.int32)
    qsl = torch.arange(B + 1, dtype=torch.int32)
    q = torch.randn(B, H, D)
    isa = _get_attn_isa(torch.float32, bs, D, "auto")
    # each layer: mixboard's pools [blocks, block_size, kv_heads, D] and vLLM's [blocks, kv_heads, k|v, ...],
    # filled with the same keys and values (vLLM's through its own cache write)
    layers = []
    for _ in range(args.layers):
        k, v = torch.randn(blocks, bs, KVH, D), torch.randn(blocks, bs, KVH, D)
        cache = torch.zeros(blocks, KVH, 2 * bs, D)
        kc, vc = cache.chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(k.flatten(0, 1), v.flatten(0, 1), kc, vc, torch.arange(blocks * bs), isa)
        layers.append((k, v, kc, vc))
    sched = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=B, num_heads=H, num_kv_heads=KVH, head_dim=D, seq_lens=seq, dtype=torch.float32,
        query_start_loc=qsl, causal=True, sliding_window_size=-1, isa=isa, enable_kv_split=True)

    def ours(module):
        own = [(k.clone(), v.clone()) for k, v, _, _ in layers]  # its own memory: no kernel runs on another's warm cache

        def run(i, out):
            k, v = own[i]
            module.decode(q.data_ptr(), q.stride(0), B, H, KVH, D, k.data_ptr(), k.stride(0), v.data_ptr(),
                          v.stride(0), bs, table.data_ptr(), table.stride(0), seq.data_ptr(), out.data_ptr(),
                          out.stride(0), D ** -0.5, 0, 0.0, 0)
        return run

    def vllm_kernel(i, out):
        ops.cpu_attention_with_kv_cache(
            query=q, key_cache=layers[i][2], value_cache=layers[i][3], output=out, query_start_loc=qsl, seq_lens=seq,
            scale=D ** -0.5, causal=True, alibi_slopes=None, sliding_window=-1, block_table=table, softcap=0,
            scheduler_metadata=sched, s_aux=None)

    kernels = [("vLLM's CPU attention", vllm_kernel), ("sdpa_cpu (installed)", ours(installed))]
    kernels += [(f"sdpa_cpu ({path})", ours(load(path))) for path in args.builds]
    outs = {}
    for name, run in kernels:
        outs[name] = torch.empty(B, H, D)
        run(0, outs[name])
    first = outs[kernels[0][0]]
    reps = max(1, 200000 // (B * args.keys * H * D // 256))
    times: dict[str, list[float]] = {name: [] for name, _ in kernels}
    for _ in range(args.rounds):
        for name, run in kernels:
            out = outs[name]
            t = time.thread_time()
            for r in range(reps):
                run(r % len(layers), out)
            times[name].append((time.thread_time() - t) / reps * 1e6)
    print(f"batch {B}, {H} heads / {KVH} kv heads x {D}, ~{args.keys} keys, {args.layers} layers' pools in turn, "
          f"1 thread; us per call, median (range) of {args.rounds} rounds of {reps}")
    for name, _ in kernels:
        v = sorted(times[name])
        diff = (outs[name] - first).abs().max().item()
        print(f"  {name}: {statistics.median(v):.1f} ({v[0]:.1f}-{v[-1]:.1f}), max |out - vLLM's| {diff:.1e}")


if __name__ == "__main__":
    main()
