"""vLLM's CommonAttentionMetadata -> mixboard's CommonBatchMetadata, once per step per vLLM
metadata builder (not per layer), for every backend and kind alike.

vLLM orders a batch decode -> short extend -> long extend -> fresh prefill (compat.decodes_first),
so its leading rows with one token and a context are mixboard's decodes. Prefix-cache hits show
up as context, as they should. The per-sequence arithmetic is done on Python ints: a step has a
few dozen sequences, and torch's per-op cost on such tiny tensors is what this step paid before.
``MIXBOARD_VLLM_TRACE=FILE`` appends one line per step (the batch's shape), for debugging and
for the tests.
"""

from __future__ import annotations

import os
import time

import torch

from mixboard.metadata import CommonBatchMetadata

from . import compat

TRACE = os.environ.get("MIXBOARD_VLLM_TRACE")


def _block_range(table_cpu: torch.Tensor, seq: list[int], block_size: int) -> tuple[int, int]:
    """Smallest and largest block id the sequences own: each row's first ceil(seq / block_size)."""
    owned = [-(-s // block_size) for s in seq]
    width = max(owned, default=0)
    if width < table_cpu.shape[1]:  # only the columns some sequence owns are read back
        table_cpu = table_cpu[:, :width]
    used = [block for row, k in zip(table_cpu.tolist(), owned) for block in row[:k]]
    return (min(used), max(used)) if used else (0, -1)


def to_common(cm, block_size: int, *, paged: bool, slots: torch.Tensor | None = None) -> CommonBatchMetadata:
    """``slots``: each request's state slot (slot-state groups); paged groups get zeros."""
    b = compat.step_batch(cm)
    n, device = b.num_reqs, b.seq_lens.device
    qsl = b.query_start_loc_cpu.tolist()
    seq = b.seq_lens_cpu.tolist()
    qlen = [qsl[i + 1] - qsl[i] for i in range(n)]
    ctx = [s - q for s, q in zip(seq, qlen)]
    nd = 0
    while nd < n and qlen[nd] == 1 and ctx[nd] > 0:
        nd += 1
    if any(q == 1 and c > 0 for q, c in zip(qlen[nd:], ctx[nd:])):
        raise RuntimeError(f"mixboard-vllm: vLLM's batch is not decodes-first (query lengths {qlen}, contexts {ctx}): "
                           "this vLLM does not reorder as compat.py expects")
    ctx_cpu = torch.tensor(ctx, dtype=torch.int32)
    if slots is not None:
        state_slots = slots[:n].to(torch.int32).contiguous()
        state_slots_cpu = state_slots if device.type == "cpu" else state_slots.cpu()
    else:
        state_slots_cpu = torch.zeros(n, dtype=torch.int32)
        state_slots = state_slots_cpu.to(device)
    if paged:
        table = b.block_table
        table_cpu = table if device.type == "cpu" else table.cpu()
        block_range = _block_range(table_cpu, seq, block_size)
        slot_mapping = b.slot_mapping.long()
        if device.type != "cpu":  # vLLM's dummy runs before a capture: PAD (-1) to the null block's first slot
            slot_mapping = slot_mapping.clamp_min(0)
    else:
        table_cpu = torch.zeros((n, 1), dtype=torch.int32)
        table = table_cpu.to(device)
        block_range = (0, -1)
        slot_mapping = torch.empty(0, dtype=torch.int64, device=device)
    common = CommonBatchMetadata(
        num_seqs=n, num_decodes=nd, num_tokens=b.num_tokens, max_query_len=max(qlen, default=0),
        max_seq_len=max(seq, default=0), block_size=block_size,
        query_start_loc=b.query_start_loc, seq_lens=b.seq_lens,
        context_lens=ctx_cpu if device.type == "cpu" else ctx_cpu.to(device, non_blocking=True),
        state_slots=state_slots, block_table=table, slot_mapping=slot_mapping,
        query_start_loc_cpu=b.query_start_loc_cpu, seq_lens_cpu=b.seq_lens_cpu, context_lens_cpu=ctx_cpu,
        state_slots_cpu=state_slots_cpu, block_table_cpu=table_cpu, block_range=block_range)
    if TRACE:
        with open(TRACE, "a") as f:
            f.write(f"{time.perf_counter():.4f} {os.getpid()} {'paged' if paged else 'slots'} T={b.num_tokens} "
                    f"seqs={n} decodes={nd} q={qlen} ctx={ctx}\n")
    return common


def to_uniform_common(cm, block_size: int, *, keep: bool = False) -> CommonBatchMetadata:
    """A step of attention layers vLLM may replay from a full CUDA graph (replay.py): every row a decode.

    Such a step is one-token requests, padded to a captured size with requests of no tokens, whose
    sequence length is 0, block row the null block and slots PAD (-1). Each becomes a decode: its
    row ``i`` (query_start_loc an arange), a length of at least 1, and PAD slots the null block's
    first (vLLM reserves block 0 for padding), so whatever the recorded forward does with a padded
    row stays there. A capture run's requests have no context either, and a real prompt of one
    token has none: a decode of an empty context, which is attention over its own key, exact.
    ``keep``: the step becomes the recording; otherwise only its tensors are copied into one, and
    ``block_range`` (a plain value a replay never sees) is not worked out.
    """
    b = compat.step_batch(cm)
    n, device = b.num_reqs, b.seq_lens.device
    on_cpu = device.type == "cpu"
    seq_cpu = b.seq_lens_cpu.to(torch.int32).clamp_min(1)
    ctx_cpu = seq_cpu - 1
    seq = seq_cpu if on_cpu else b.seq_lens.to(torch.int32).clamp_min(1)
    ctx = ctx_cpu if on_cpu else seq - 1
    qsl_cpu = torch.arange(n + 1, dtype=torch.int32)
    qsl = qsl_cpu if on_cpu else qsl_cpu.to(device, non_blocking=True)
    slots_cpu = torch.zeros(n, dtype=torch.int32)  # no slot-state layer is replayed
    table = b.block_table
    table_cpu = table if on_cpu else table.cpu()
    block_range = _block_range(table_cpu, seq_cpu.tolist(), block_size) if keep else (0, -1)
    if TRACE:
        with open(TRACE, "a") as f:
            f.write(f"{time.perf_counter():.4f} {os.getpid()} paged T={n} seqs={n} decodes={n} uniform\n")
    return CommonBatchMetadata(
        num_seqs=n, num_decodes=n, num_tokens=n, max_query_len=1, max_seq_len=int(seq_cpu.max()) if n else 1,
        block_size=block_size, query_start_loc=qsl, seq_lens=seq, context_lens=ctx,
        state_slots=slots_cpu if on_cpu else slots_cpu.to(device), block_table=table,
        slot_mapping=b.slot_mapping.long().clamp_min(0), query_start_loc_cpu=qsl_cpu, seq_lens_cpu=seq_cpu,
        context_lens_cpu=ctx_cpu, state_slots_cpu=slots_cpu, block_table_cpu=table_cpu, block_range=block_range)


class StepMeta:
    """What each mixboard layer of one vLLM group gets in a step: its plan group's metadata."""

    __slots__ = ("common", "metas")

    def __init__(self, common, metas):
        self.common, self.metas = common, metas


def build_step(common, groups, builders) -> StepMeta:
    # each plan group's builder output goes to its backend untouched: no per-backend code here
    return StepMeta(common, {g: builders[g](common) for g in groups})
