"""``sdpa``'s ``decode_chunk_mib`` option: the builder the plan makes cuts a
step's decodes into chunks of at most that many MiB of gathered keys, the
outputs do not change, and the kit passes on the smallest value."""

from __future__ import annotations

import torch

from mixboard import AttentionSpec, CommonBatchMetadata, get_registry, simulate
from mixboard.kinds.attention import attention_state
from mixboard.ops.checks import build_builder, build_impl
from mixboard.testing import AttentionOracle, allocate_state
from mixboard.testing.conformance import run_suite

CPU = simulate("cpu")
SPEC = AttentionSpec(num_heads=8, num_kv_heads=8, head_size=128)  # 4 KiB of keys a token in float32
BLOCK = 16  # 1 MiB of keys: 16 blocks
CONTEXTS = [250, 200, 150, 100]  # 16, 13, 10 and 7 blocks with the new token: one sequence a chunk at 1 MiB


def _planned(options):
    plan = get_registry().plan([("model.layers.0.self_attn", "attention", SPEC)], CPU, overrides="attention=sdpa",
                               options=options)
    cls, values = plan.layers[0].selection.backend, plan.options["sdpa"]
    return build_builder(cls, SPEC, CPU, values), build_impl(cls, SPEC, CPU, "model.layers.0.self_attn", values)


def _step():
    tables, at = [], 0
    for context in CONTEXTS:
        n = -(-(context + 1) // BLOCK)
        tables.append(list(range(at, at + n)))
        at += n
    common = CommonBatchMetadata.build([1] * len(CONTEXTS), CONTEXTS, list(range(len(CONTEXTS))), tables, BLOCK)
    g = torch.Generator().manual_seed(0)
    rows = len(CONTEXTS)
    q = torch.randn(rows, SPEC.num_heads, SPEC.head_size, generator=g)
    k = torch.randn(rows, SPEC.num_kv_heads, SPEC.head_size, generator=g)
    v = torch.randn(rows, SPEC.num_kv_heads, SPEC.head_size, generator=g)
    state = allocate_state(attention_state(SPEC), at, BLOCK)
    for pool in state.values():
        pool.copy_(torch.randn(pool.shape, generator=g))
    return common, q, k, v, state


def test_the_option_sets_how_many_decodes_share_a_gather_and_changes_no_output():
    common, q, k, v, state = _step()
    ref = AttentionOracle(SPEC).forward(q, k, v, {n: t.clone() for n, t in state.items()}, common)
    outs = {}
    for mib, chunks in ((None, 1), (1, len(CONTEXTS))):
        build, impl = _planned(None if mib is None else f"sdpa.decode_chunk_mib={mib}")
        meta = build(common)
        assert len(meta.decode_chunks) == chunks, mib
        outs[mib] = impl.forward(q, k, v, {n: t.clone() for n, t in state.items()}, meta)
        assert float((outs[mib] - ref).abs().max()) <= 1e-5
    assert float((outs[None] - outs[1]).abs().max()) <= 1e-6


def test_the_kit_passes_on_the_smallest_workspace():
    report = run_suite("sdpa", "cpu", ["float32"], options={"decode_chunk_mib": 1})
    assert report.options == {"decode_chunk_mib": 1}
    # sdpa declares capture "never": the kit's capture cases are skipped, every other case passes
    assert report.ok and all(r.status == "pass" or (r.status == "skip" and r.case.startswith("capture_"))
                             for r in report.results), [r for r in report.results if r.status != "pass"]
