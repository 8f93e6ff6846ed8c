"""vLLM's CommonAttentionMetadata -> mixboard's CommonBatchMetadata, once per step per vLLM
metadata builder (not per layer), for every backend and kind alike.

vLLM orders a batch decode -> short extend -> long extend -> fresh prefill (compat.decodes_first),
so its leading rows with one token and a context are mixboard's decodes. Prefix-cache hits show
up as context, as they should. ``MIXBOARD_VLLM_TRACE=FILE`` appends one line per step (the
batch's shape), for debugging and for the tests.
"""

from __future__ import annotations

import os
import time

import torch

from mixboard.metadata import CommonBatchMetadata

TRACE = os.environ.get("MIXBOARD_VLLM_TRACE")


def to_common(cm, block_size: int, *, paged: bool, slots: torch.Tensor | None = None) -> CommonBatchMetadata:
    """``slots``: each request's state slot (slot-state groups); paged groups get zeros."""
    n, T = cm.num_reqs, cm.num_actual_tokens
    qsl, qsl_cpu = cm.query_start_loc[: n + 1], cm.query_start_loc_cpu[: n + 1]
    seq = cm.seq_lens[:n]
    # exact unless async speculative decoding, which the builders refuse (compat.decodes_first)
    seq_cpu = seq if seq.device.type == "cpu" else cm.seq_lens_cpu_upper_bound[:n]
    qlen_cpu = qsl_cpu[1:] - qsl_cpu[:-1]
    ctx_cpu = (seq_cpu - qlen_cpu).to(torch.int32)
    is_decode = (qlen_cpu == 1) & (ctx_cpu > 0)
    nd = int(is_decode.sum())
    if nd and not bool(is_decode[:nd].all()):
        raise RuntimeError(f"mixboard-vllm: vLLM's batch is not decodes-first (query lengths {qlen_cpu.tolist()}, "
                           f"contexts {ctx_cpu.tolist()}): this vLLM does not reorder as compat.py expects")
    state_slots = (slots[:n].to(torch.int32).contiguous() if slots is not None
                   else torch.zeros(n, dtype=torch.int32, device=seq.device))
    if paged:
        table = cm.block_table_tensor[:n]
        table_cpu = table if table.device.type == "cpu" else table.cpu()
        used = (seq_cpu + block_size - 1) // block_size
        ids = table_cpu[torch.arange(table_cpu.shape[1])[None, :] < used[:, None]]
        block_range = (int(ids.min()), int(ids.max())) if ids.numel() else (0, -1)
        slot_mapping = cm.slot_mapping[:T].long()
    else:
        table = torch.zeros((n, 1), dtype=torch.int32, device=seq.device)
        table_cpu = table.cpu()
        block_range = (0, -1)
        slot_mapping = torch.empty(0, dtype=torch.int64, device=seq.device)
    ctx = ctx_cpu if seq.device.type == "cpu" else ctx_cpu.to(seq.device, non_blocking=True)
    common = CommonBatchMetadata(
        num_seqs=n, num_decodes=nd, num_tokens=T, max_query_len=int(qlen_cpu.max()),
        max_seq_len=int(seq_cpu.max()), block_size=block_size,
        query_start_loc=qsl, seq_lens=seq, context_lens=ctx, state_slots=state_slots,
        block_table=table, slot_mapping=slot_mapping,
        query_start_loc_cpu=qsl_cpu, seq_lens_cpu=seq_cpu, context_lens_cpu=ctx_cpu,
        state_slots_cpu=state_slots.cpu(), block_table_cpu=table_cpu, block_range=block_range)
    if TRACE:
        with open(TRACE, "a") as f:
            f.write(f"{time.perf_counter():.4f} {os.getpid()} {'paged' if paged else 'slots'} T={T} seqs={n} "
                    f"decodes={nd} q={qlen_cpu.tolist()} ctx={ctx_cpu.tolist()}\n")
    return common


class StepMeta:
    """What each mixboard layer of one vLLM group gets in a step: its plan group's metadata."""

    __slots__ = ("common", "metas")

    def __init__(self, common, metas):
        self.common, self.metas = common, metas


def build_step(common, groups, builders) -> StepMeta:
    # each plan group's builder output goes to its backend untouched: no per-backend code here
    return StepMeta(common, {g: builders[g](common) for g in groups})
