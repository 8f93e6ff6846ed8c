"""What the ``sdpa`` impl needs per step, built once per step per group.

Everything here depends only on the step's metadata and the cache layout,
so every layer of a group shares it; masks, which also depend on a layer's
sliding window, are memoized here on first use, so layers that agree on
the window share them too.

Decodes are attended in a few batched calls: each *chunk* of decode
sequences gathers whole blocks of its sequences (one ``index_select``, a
plain memory copy per block) into ``[n, keys, kv_heads, head_size]`` and
masks the padded tail. Chunks are cut at ``chunk_bytes`` of gathered keys
(a chunk holds at least one sequence), longest sequences first so that
padding stays small. The gathers land in two workspace buffers that the
builder keeps: every chunk, layer and step of the group reuses them, so no
step pays for fresh memory (measured on a 2-core CPU: a fresh 64 MiB
temporary costs ~5x its copy in page faults, as glibc maps and unmaps
blocks that large on every allocation; that, more than arithmetic, is what
transformers' decode spends on its growing cache). ``chunk_bytes`` is the
backend's ``decode_chunk_mib`` option (``CHUNK_BYTES`` by default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from mixboard.dtypes import torch_dtype
from mixboard.metadata import CommonBatchMetadata

CHUNK_BYTES = 64 << 20  # gathered K (and again V) per decode chunk


@dataclass
class DecodeChunk:
    rows: torch.Tensor  # int64 [n]: the chunk's decode sequences (= their token rows: decodes come first)
    blocks: torch.Tensor  # int64 [n * num_blocks]: blocks to gather, row by row
    num_keys: int  # num_blocks * block_size: padded keys per sequence
    seq_lens: torch.Tensor  # int64 [n, 1]: valid keys per sequence
    same_len: int | None = None  # the length every sequence of the chunk has, if they share one


@dataclass
class Prefill:
    """``count`` consecutive prefills of ``query_len`` new tokens each: several only when none has context."""

    start: int  # first token row
    count: int
    query_len: int
    context_len: int
    blocks: torch.Tensor | None  # int64: blocks covering the sequence; None without context (attends its own k, v)

    @property
    def end(self) -> int:
        return self.start + self.count * self.query_len

    @property
    def seq_len(self) -> int:
        return self.context_len + self.query_len


@dataclass
class SdpaMeta:
    common: CommonBatchMetadata
    num_tokens: int
    block_size: int
    slot_mapping: torch.Tensor  # int64 [T]
    block_range: tuple[int, int]  # smallest and largest block id the step reads or writes
    decode_chunks: tuple[DecodeChunk, ...]
    prefills: tuple[Prefill, ...]
    # sdpa_cpu's kernel: per prefill token (rows num_decodes..T-1), its sequence's block-table row and the
    # keys it sees (its position + 1), int32; None where the builder was not asked for them
    prefill_rows: tuple[torch.Tensor, torch.Tensor] | None = None
    _masks: dict = field(default_factory=dict, repr=False)
    _buffers: dict = field(default_factory=dict, repr=False)

    def mask(self, key: tuple, make: Callable[[], torch.Tensor | None]) -> torch.Tensor | None:
        """``make()``, once per step for each key (layers of a group share it)."""
        if key not in self._masks:
            self._masks[key] = make()
        return self._masks[key]

    def buffer(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """A workspace of ``shape`` that later calls with the same name reuse (its contents are not kept)."""
        size = 1
        for n in shape:
            size *= n
        flat = self._buffers.get(name)
        if flat is None or flat.numel() < size or flat.dtype != like.dtype or flat.device != like.device:
            flat = self._buffers[name] = like.new_empty(size)
        return flat[:size].view(shape)


def bytes_per_token(spec) -> int:
    """Bytes of one token's keys (or values) in the cache of a layer of ``spec``."""
    return spec.num_kv_heads * spec.head_size * torch_dtype(spec.dtype).itemsize


def build_meta(common: CommonBatchMetadata, bytes_per_token: int, workspace: dict | None = None,
               decode_chunks: bool = True, prefill_rows: bool = False, chunk_bytes: int = CHUNK_BYTES) -> SdpaMeta:
    """The step's metadata; ``workspace`` (a dict the caller keeps) lends decode buffers from step to step.
    ``decode_chunks=False``: no gather plan for the decodes (a kernel that reads the block table itself);
    ``prefill_rows=True``: each prefill token's table row and key count (``SdpaMeta.prefill_rows``).
    ``chunk_bytes``: gathered keys per decode chunk (a chunk holds at least one sequence)."""
    if not isinstance(common, CommonBatchMetadata):
        raise TypeError(f"the sdpa builder takes the step's CommonBatchMetadata, not {type(common).__name__}")
    device = common.block_table.device
    bs = common.block_size
    seq_lens = common.seq_lens_cpu.tolist()
    ctx_lens = common.context_lens_cpu.tolist()
    qsl = common.query_start_loc_cpu.tolist()
    nblocks = [-(-s // bs) for s in seq_lens]
    table = common.block_table.long()

    chunks = _decode_chunks(table, seq_lens[: common.num_decodes], nblocks, bs, bytes_per_token, device, chunk_bytes) \
        if decode_chunks else ()
    prefills: list[Prefill] = []
    for i in range(common.num_decodes, common.num_seqs):
        qlen, ctx = qsl[i + 1] - qsl[i], ctx_lens[i]
        last = prefills[-1] if prefills else None
        if ctx == 0 and last is not None and last.blocks is None and last.query_len == qlen:
            last.count += 1  # fresh prompts of one length: one batched call
        else:
            prefills.append(Prefill(qsl[i], 1, qlen, ctx, table[i, : nblocks[i]] if ctx else None))
    meta = SdpaMeta(common, common.num_tokens, bs, common.slot_mapping.long(), common.block_range, chunks, tuple(prefills))
    if prefill_rows and common.num_seqs > common.num_decodes:
        nd = common.num_decodes
        starts = common.query_start_loc_cpu.long()
        qlens = starts[nd + 1:] - starts[nd:-1]
        seq = torch.repeat_interleave(torch.arange(nd, common.num_seqs), qlens)
        offset = torch.arange(len(seq)) + starts[nd] - starts[seq]  # the token's place among its sequence's new ones
        seen = common.context_lens_cpu.long()[seq] + offset + 1
        meta.prefill_rows = (seq.to(torch.int32).to(device), seen.to(torch.int32).to(device))
    if workspace is not None:
        meta._buffers = workspace
    return meta


def _decode_chunks(table, seq_lens, nblocks, bs, bytes_per_token, device, chunk_bytes) -> tuple[DecodeChunk, ...]:
    # Longest first, so sequences of like length share a chunk and padding stays small.
    order = sorted(range(len(seq_lens)), key=lambda i: -nblocks[i])
    budget = max(1, chunk_bytes // (bs * bytes_per_token))  # blocks per chunk
    chunks, i = [], 0
    while i < len(order):
        width = nblocks[order[i]]  # the chunk's longest sequence
        n = max(1, min(len(order) - i, budget // width))
        rows = order[i: i + n]
        # Columns past a sequence's own blocks are padding (masked out): read block 0 there,
        # whatever the table holds.
        cols = torch.arange(width)
        own = cols[None, :] < torch.tensor([nblocks[r] for r in rows])[:, None]
        rows_t = torch.tensor(rows, device=device)
        blocks = torch.where(own.to(device), table[rows_t, :width], 0).reshape(-1)
        lens = torch.tensor([seq_lens[r] for r in rows], device=device).view(-1, 1)
        same = seq_lens[rows[0]] if all(seq_lens[r] == seq_lens[rows[0]] for r in rows) else None
        chunks.append(DecodeChunk(rows_t, blocks, width * bs, lens, same))
        i += n
    return tuple(chunks)
