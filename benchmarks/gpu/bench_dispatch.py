"""Dispatch through mixboard against calling the kernels directly, on a GPU.

For every GPU backend, one layer's step is timed twice: through mixboard (the
backend's builder on the step's CommonBatchMetadata, then ``impl.forward``,
input checks included) and as the same kernels called directly with their
arguments made once beforehand, the way an engine written for one library
calls it. Both write the same caches; the overhead is mixboard's Python
around the kernels. Steps: decodes (16 sequences of 512 tokens, where
dispatch weighs most) for every backend, and a 512-token prefill for the
attention backends.

    python benchmarks/gpu/bench_dispatch.py [--out results.md] [--iters 200]

A backend whose library is missing or which cannot serve here gets a row
saying why. Target: at most 5 % overhead.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from mixboard import AttentionSpec, CommonBatchMetadata, Mamba1Spec, Mamba2Spec, ShortConvSpec, get_registry
from mixboard.backend import state_of
from mixboard.environment import detect
from mixboard.ops.checks import build_impl
from mixboard.selection import reasons_against
from mixboard.testing import allocate_state
from mixboard.testing.conformance.kinds import ADAPTERS, cast_weights

TARGET = 0.05


class Sizes:
    """The step's sizes; ``--small`` shrinks them for a dry run of this script on CPU in Triton's
    interpreter (TRITON_INTERPRET=1 ... --device cpu --dtype float32 --small), which checks the
    direct calls and the comparison, not the times."""

    device, batch, context, prompt = "cuda", 16, 512, 512


S = Sizes()


@dataclass
class Layer:
    """One layer's step, made as the runner makes it."""

    impl: object
    builder: Callable
    common: CommonBatchMetadata
    inputs: dict
    weights: object
    state: dict
    spec: object

    def through_mixboard(self):
        args = list(self.inputs.values()) + ([self.weights] if self.weights is not None else [])
        return self.impl.forward(*args, self.state, self.builder(self.common))


def make_layer(name: str, spec, prefill: bool) -> Layer:
    registry = get_registry()
    cls = registry.backends[name].cls
    env = detect()
    kind = registry.kind(cls.kind)
    state_spec = state_of(cls, kind, spec)
    paged = state_spec.layout == "paged"
    block = max(16, getattr(state_spec, "block_multiple", 1) or 1) if paged else 16
    lens = [S.prompt] if prefill else [1] * S.batch
    ctx = [0] if prefill else [S.context] * S.batch
    per_seq = -(-(S.context + S.prompt) // block)
    tables = [list(range(1 + i * per_seq, 1 + (i + 1) * per_seq)) for i in range(len(lens))] if paged else [[]] * len(lens)
    common = CommonBatchMetadata.build(lens, ctx, list(range(1, len(lens) + 1)), tables, block, device=S.device)
    records = 1 + len(lens) * per_seq if paged else len(lens) + 1
    state = allocate_state(state_spec, records, block, device=S.device)
    for pool in state.values():
        pool.normal_(0, 0.5)  # a context worth reading
    adapter = ADAPTERS[cls.kind]
    gen = torch.Generator().manual_seed(0)
    dtype = getattr(torch, spec.dtype)
    inputs = {k: (torch.randn((common.num_tokens, *shape), generator=gen) * scale).to(S.device, dtype)
              for k, (shape, scale) in adapter.inputs(spec).items()}
    weights = cast_weights(adapter.weights(spec, gen), dtype, S.device) if adapter.weights else None
    impl = build_impl(cls, spec, env, f"bench.{name}")
    return Layer(impl, cls.builder(spec, env), common, inputs, weights, state, spec)


# --------------------------------------------------------------------------- the direct calls


def direct_flash_attn(layer: Layer) -> Callable:
    from flash_attn import flash_attn_varlen_func

    c, s = layer.common, layer.spec
    k_cache, v_cache = layer.state["k_cache"], layer.state["v_cache"]
    cu_k = F.pad(c.seq_lens.cumsum(0, dtype=torch.int32), (1, 0))
    q, k, v = layer.inputs.values()

    def run():
        k_cache.view(-1, *k.shape[1:]).index_copy_(0, c.slot_mapping, k)
        v_cache.view(-1, *v.shape[1:]).index_copy_(0, c.slot_mapping, v)
        return flash_attn_varlen_func(q, k_cache, v_cache, c.query_start_loc, cu_k, c.max_query_len, c.max_seq_len,
                                      softmax_scale=s.softmax_scale, causal=True, block_table=c.block_table)
    return run


def direct_triton_attn(layer: Layer) -> Callable:
    from mixboard_triton._attention import paged_attention

    c, s = layer.common, layer.spec
    k_cache, v_cache = layer.state["k_cache"], layer.state["v_cache"]
    q, k, v = layer.inputs.values()

    def run():
        k_cache.view(-1, *k.shape[1:]).index_copy_(0, c.slot_mapping, k)
        v_cache.view(-1, *v.shape[1:]).index_copy_(0, c.slot_mapping, v)
        return paged_attention(q, k_cache, v_cache, c.block_table, c.query_start_loc, c.seq_lens, c.max_query_len,
                               scale=s.softmax_scale, causal=True, window=None, soft_cap=None)
    return run


def direct_short_conv_cuda(layer: Layer) -> Callable:
    from causal_conv1d import causal_conv1d_update

    B, C, x = layer.inputs.values()
    pool, w = layer.state["conv"], layer.weights.conv_weight
    slots = layer.common.state_slots  # int32, the decodes' slots

    def run():
        return causal_conv1d_update(B * x, pool, w, None, activation=None, conv_state_indices=slots).mul_(C)
    return run


def direct_short_conv_triton(layer: Layer) -> Callable:
    from mixboard_triton._conv import conv_step

    B, C, x = layer.inputs.values()
    pool, w = layer.state["conv"], layer.weights.conv_weight
    return lambda: conv_step(x, w, None, pool, layer.common.state_slots, B=B, C=C)


def _mamba1_weights(layer: Layer):
    w = layer.weights
    return (w.conv_weight, w.conv_bias, w.x_proj_weight, w.dt_proj_weight, w.dt_proj_bias.float(), w.A.float(),
            w.D.float())


def direct_mamba1_cuda(layer: Layer) -> Callable:
    from causal_conv1d import causal_conv1d_update
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update

    x, z = layer.inputs.values()
    conv_w, conv_b, x_proj, dt_proj, dt_bias, A, D = _mamba1_weights(layer)
    R, N = layer.spec.dt_rank, layer.spec.d_state
    slots = layer.common.state_slots

    def run():
        xc = causal_conv1d_update(x, layer.state["conv"], conv_w, conv_b, activation="silu", conv_state_indices=slots)
        dbc = F.linear(xc, x_proj)
        dt = F.linear(dbc[:, :R], dt_proj)
        return selective_state_update(layer.state["ssm"], xc, dt, A, dbc[:, R:R + N], dbc[:, R + N:], D=D, z=z,
                                      dt_bias=dt_bias, dt_softplus=True, state_batch_indices=slots)
    return run


def direct_mamba1_triton(layer: Layer) -> Callable:
    from mixboard_triton._conv import conv_step
    from mixboard_triton._scan import state_update

    x, z = layer.inputs.values()
    w = layer.weights
    R, N = layer.spec.dt_rank, layer.spec.d_state
    slots = layer.common.state_slots

    def run():
        xc = conv_step(x, w.conv_weight, w.conv_bias, layer.state["conv"], slots, silu=True)
        dbc = xc @ w.x_proj_weight.t()
        dt = dbc[:, :R] @ w.dt_proj_weight.t()
        return state_update(xc, dt, dbc[:, R:R + N], dbc[:, R + N:], z, w.A, w.D, w.dt_proj_bias, layer.state["ssm"],
                            slots)
    return run


def direct_mamba2_triton(layer: Layer) -> Callable:
    # The same kernels mamba2_triton runs for decodes: mixboard's conv step (it uses no causal-conv1d),
    # mamba-ssm's selective_state_update with per-head values broadcast, and its gated RMSNorm.
    from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update
    from mixboard.ops.causal_conv import causal_conv1d_step

    s, w = layer.spec, layer.weights
    z, xBC, dt = layer.inputs.values()
    H, P, G, N, DI = s.num_heads, s.head_dim, s.n_groups, s.d_state, s.d_inner
    n = xBC.shape[0]
    slots64, slots = layer.common.state_slots.long(), layer.common.state_slots
    A = w.A.float().view(H, 1, 1).expand(H, P, N)
    D, dt_bias = w.D.view(H, 1).expand(H, P), w.dt_bias.view(H, 1).expand(H, P)

    def run():
        xbc = causal_conv1d_step(xBC, w.conv_weight, w.conv_bias, layer.state["conv"], slots64, activation="silu",
                                 slot_range=(1, n + 1))  # the step's slots are 1..n: records in place, as planned
        x = xbc[:, :DI].view(n, H, P)
        B, C = xbc[:, DI:DI + G * N].view(n, G, N), xbc[:, DI + G * N:].view(n, G, N)
        y = selective_state_update(layer.state["ssm"], x, dt.unsqueeze(-1).expand(n, H, P), A, B, C, D=D, z=None,
                                   dt_bias=dt_bias, dt_softplus=True, state_batch_indices=slots)
        return rmsnorm_fn(y.reshape(n, DI), w.norm_weight, None, z=z, eps=s.norm_eps, group_size=DI // G,
                          norm_before_gate=False)
    return run


def cases(dtype: str, small: bool) -> list:
    """(backend, spec, prefill, direct call): real widths (Llama-3-8B's attention, LFM2-1.2B's conv,
    mamba-1.4b, Mamba-2 2.7b's heads), or tiny ones for a dry run."""
    attn = AttentionSpec(num_heads=32, num_kv_heads=8, head_size=128, dtype=dtype)
    conv = ShortConvSpec(hidden_size=2048, dtype=dtype)
    m1 = Mamba1Spec(d_inner=4096, d_state=16, dt_rank=128, dtype=dtype)
    m2 = Mamba2Spec(num_heads=64, head_dim=64, d_state=128, n_groups=1, dtype=dtype)
    if small:
        attn = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=32, dtype=dtype)
        conv = ShortConvSpec(hidden_size=64, dtype=dtype)
        m1 = Mamba1Spec(d_inner=64, d_state=16, dt_rank=4, dtype=dtype)
        m2 = Mamba2Spec(num_heads=4, head_dim=16, d_state=16, n_groups=1, dtype=dtype)
    return [
        ("flash_attn", attn, False, direct_flash_attn),
        ("flash_attn", attn, True, direct_flash_attn),
        ("triton_attn", attn, False, direct_triton_attn),
        ("triton_attn", attn, True, direct_triton_attn),
        ("short_conv_cuda", conv, False, direct_short_conv_cuda),
        ("short_conv_triton", conv, False, direct_short_conv_triton),
        ("mamba1_cuda", m1, False, direct_mamba1_cuda),
        ("mamba1_triton", m1, False, direct_mamba1_triton),
        ("mamba2_triton", m2, False, direct_mamba2_triton),
    ]


def same_result(layer: Layer, direct: Callable) -> float:
    """Largest |mixboard - direct| over one step from the same state: the two time the same work."""
    saved = {k: v.clone() for k, v in layer.state.items()}
    ours = layer.through_mixboard().float()
    for k, v in saved.items():
        layer.state[k].copy_(v)
    return (ours - direct().float()).abs().max().item()


def sync() -> None:
    if S.device == "cuda":
        torch.cuda.synchronize()


def per_call_us(fn: Callable, iters: int) -> float:
    """Median over 5 rounds of iters back-to-back calls, wall time / call (CPU issue and GPU work overlapping,
    as in serving; a synchronisation ends each round)."""
    for _ in range(min(10, iters)):
        fn()
    rounds = []
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        rounds.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(rounds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/gpu/results.md")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="tiny sizes: a dry run of the script itself")
    args = ap.parse_args(argv)
    S.device = args.device
    if args.small:
        S.batch, S.context, S.prompt = 2, 8, 8
    if S.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA (or ROCm) GPU visible to torch: nothing to time")
        return 2
    env = detect()
    registry = get_registry()
    rows = []
    for name, spec, prefill, direct in cases(args.dtype, args.small):
        step = f"prefill {S.prompt}" if prefill else f"decode x{S.batch} @ {S.context}"
        entry = registry.backends.get(name)
        why = "not installed" if entry is None else "; ".join(reasons_against(entry.cls, spec, env))
        if why:
            rows.append(f"| {name} | {step} | - | - | - | not run: {why} |")
            continue
        try:
            layer = make_layer(name, spec, prefill)
            ours, theirs = layer.through_mixboard, direct(layer)
            diff = same_result(layer, theirs)
            if not diff <= (1e-5 if args.dtype == "float32" else 2e-2):
                raise AssertionError(f"the direct call computes something else: |mixboard - direct| = {diff:.3g}")
            t_direct, t_ours = per_call_us(theirs, args.iters), per_call_us(ours, args.iters)
            t_direct2 = per_call_us(theirs, args.iters)  # twice, either side of ours: drift shows as a spread
            base = min(t_direct, t_direct2)
            over = t_ours / base - 1
            verdict = "ok" if over <= TARGET else "over target"
            rows.append(f"| {name} | {step} | {base:.1f} (/{max(t_direct, t_direct2):.1f}) | {t_ours:.1f} | "
                        f"{over * 100:+.1f} % | {verdict} |")
        except Exception as exc:  # noqa: BLE001 - one backend's failure is a row, not the end of the table
            rows.append(f"| {name} | {step} | - | - | - | error: {type(exc).__name__}: {exc} |".replace("\n", " "))
        print(rows[-1], flush=True)
    table = "\n".join([
        f"{torch.cuda.get_device_name() if S.device == 'cuda' else S.device} ({env}), torch {torch.__version__}, "
        f"{args.iters} calls x 5 rounds, median wall time per call (us), {args.dtype}; "
        f"target: overhead <= {TARGET * 100:.0f} %",
        "",
        "| backend | step | direct (us; spread) | through mixboard (us) | overhead | |",
        "| --- | --- | ---: | ---: | ---: | --- |",
        *rows,
    ])
    with open(args.out, "w") as f:
        f.write(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
