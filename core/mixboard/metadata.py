"""Common batch metadata: built once per step by the runner, handed to every
group's builder. ``help(CommonBatchMetadata)`` documents every field.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from typing import Sequence

import torch


@dataclass
class CommonBatchMetadata:
    """One step of a batch, described once for every layer.

    The runner builds one per step (``CommonBatchMetadata.build``) and gives
    the same object to every group's builder; what a builder returns is the
    ``meta`` its layers' ``forward`` receives (the default builder passes this
    object itself). Nothing here may be changed by a backend: not a tensor's
    values, not a field (the conformance kit compares every field before and
    after each builder and ``forward`` call, and fails naming the field).

    Rows. The new tokens of all sequences are packed along one axis of T =
    ``num_tokens`` rows, without padding: the rows of sequence ``i`` are
    ``query_start_loc[i]`` to ``query_start_loc[i + 1]`` (exclusive).
    Sequence ``i``'s new token ``j`` sits at position ``context_lens[i] + j``
    of the sequence (positions count from 0). Sequences come in this order:

    * decodes first: the first ``num_decodes`` sequences have one new token
      each and ``context_lens > 0``, so decode ``i`` is row ``i``;
    * then prefills: every other sequence. A prefill with ``context_lens`` 0
      is fresh (its first tokens); one with ``context_lens > 0`` continues
      from its saved state (the next chunk of a long prompt, or a resumed
      sequence). A fresh prompt of one token is a prefill, not a decode.

    No other order is promised (not by length, slot or age).

    Fields (int32 tensors unless said; "device" is the run's device):

    num_seqs: int. Sequences in the step (>= 1).
    num_decodes: int. The first ``num_decodes`` sequences are the decodes.
    num_tokens: int. T, the rows of every per-token input (>= 1).
    max_query_len: int. The most new tokens of one sequence.
    max_seq_len: int. The largest ``seq_lens``.
    block_size: int. Tokens per block of every paged pool (dim 1 of the pool).
    query_start_loc: [num_seqs + 1] on the device. Row offsets: 0, then the
        running sum of each sequence's new tokens; the last is num_tokens.
    seq_lens: [num_seqs] on the device. context_lens + new tokens: the
        sequence's length once this step is done.
    context_lens: [num_seqs] on the device. Tokens processed in earlier
        steps, whose state the backend saved then. 0: a fresh sequence,
        which must start from zero state and ignore what its records hold
        (they may hold a finished sequence's state).
    state_slots: [num_seqs] on the device. Each sequence's record in the
        'slots' pools (``pool[state_slots[i]]``); distinct within a step.
        Any slot id may occur, 0 included; ids are not in any order. They
        hold for this step only: a runner may move a sequence's state to
        another slot between steps (vLLM does, with prefix caching), so a
        backend reads them every step and never keeps one from an earlier
        step. In a model without 'slots' state they are all 0 and mean
        nothing.
    block_table: [num_seqs, max_blocks] on the device. Row ``i`` lists the
        blocks of sequence ``i`` in the 'paged' pools, in position order:
        position ``p`` lives in block ``block_table[i, p // block_size]`` at
        offset ``p % block_size``. Only the first ``ceil(seq_lens[i] /
        block_size)`` entries are the sequence's; the rest of the row is
        padding, which may hold any real block id (``build`` writes 0; an
        engine may leave other ids there, another sequence's blocks
        included): never read through padding unmasked, never write
        through it. Like slots, block ids hold for this step only. In a
        model without 'paged' state: zeros [num_seqs, 1].
    slot_mapping: int64 [num_tokens] on the device. For each row, where its
        token goes in the 'paged' pools, as ``block * block_size + offset``
        (block ``slot_mapping[r] // block_size``, offset ``slot_mapping[r] %
        block_size``; a row of the pool seen as ``[num_blocks * block_size,
        ...]`` only where its blocks lie back to back, which is not
        promised). Empty in a model without 'paged' state.
    query_start_loc_cpu, seq_lens_cpu, context_lens_cpu, state_slots_cpu,
    block_table_cpu: host (CPU) copies of the same values, so that a
        builder can plan without waiting for the device. On a CPU run a
        device tensor and its host copy are one tensor.
    block_range: (int, int). The smallest and largest block id the step's
        sequences own (read or write); (0, -1) without paged state.

    Derived, read-only: ``num_prefills`` (num_seqs - num_decodes),
    ``num_decode_tokens`` (= num_decodes), ``sequence_rows`` (host int64
    [num_seqs, 4]: first row, end row, state slot, has context; made on
    first use, then shared by every layer) and ``phase_parts`` (the decodes
    and the prefills as metadata of their own, for layers split by phase).

    All tensors are contiguous. ``build`` makes one from plain lists, as the
    runner, the kit and tests do.
    """

    num_seqs: int
    num_decodes: int  # the first num_decodes sequences are decodes (1 token each)
    num_tokens: int
    max_query_len: int
    max_seq_len: int
    block_size: int  # tokens per block of every paged pool
    query_start_loc: torch.Tensor  # int32 [num_seqs + 1]: token offsets of each sequence
    seq_lens: torch.Tensor  # int32 [num_seqs]: context + new tokens
    context_lens: torch.Tensor  # int32 [num_seqs]: tokens processed in earlier steps
    state_slots: torch.Tensor  # int32 [num_seqs]: each sequence's record in 'slots' pools
    block_table: torch.Tensor  # int32 [num_seqs, max_blocks]: each sequence's blocks in 'paged' pools
    slot_mapping: torch.Tensor  # int64 [num_tokens]: block * block_size + offset of each new token
    # Host copies, so that builders can plan without a device synchronisation.
    query_start_loc_cpu: torch.Tensor
    seq_lens_cpu: torch.Tensor
    context_lens_cpu: torch.Tensor
    state_slots_cpu: torch.Tensor
    block_table_cpu: torch.Tensor
    # (smallest, largest) block id the step reads or writes; (0, -1) without paged state.
    block_range: tuple[int, int] = (0, -1)

    @property
    def num_prefills(self) -> int:
        return self.num_seqs - self.num_decodes

    @property
    def num_decode_tokens(self) -> int:
        return self.num_decodes

    @cached_property
    def sequence_rows(self) -> torch.Tensor:
        """Host int64 [num_seqs, 4], one row per sequence: first token, end token (along the packed
        axis), state slot, has context (1: continues from saved state, 0: starts fresh). For kernels
        that walk a step sequence by sequence; made on first use, once per step for every layer."""
        starts = self.query_start_loc_cpu.long()
        return torch.stack([starts[:-1], starts[1:], self.state_slots_cpu.long(),
                            (self.context_lens_cpu > 0).long()], 1).contiguous()

    @cached_property
    def phase_parts(self) -> tuple["CommonBatchMetadata | None", "CommonBatchMetadata | None"]:
        """(the decodes, the prefills) as metadata of their own, each None where the step has none
        (a step of one phase is its own part): what a layer that runs each phase through its own
        backend hands each backend's builder (``mixboard.phases``). Made on first use, once per step."""
        if self.num_decodes == self.num_seqs:
            return self, None
        if self.num_decodes == 0:
            return None, self
        return self.sequences(0, self.num_decodes), self.sequences(self.num_decodes, self.num_seqs)

    def sequences(self, first: int, end: int) -> "CommonBatchMetadata":
        """Metadata of sequences ``first`` to ``end`` (exclusive) of this step alone: their rows,
        offsets counted from their first row, the same pools' blocks and slots."""
        host = self.query_start_loc_cpu
        row0, row1 = int(host[first]), int(host[end])
        qsl_cpu = host[first:end + 1] - row0
        seq_cpu = self.seq_lens_cpu[first:end]
        table_cpu = self.block_table_cpu[first:end]
        block_range = (0, -1)
        if self.slot_mapping.numel():  # the blocks the part's sequences own, as ``build`` counts them
            owned = [table_cpu[i, :-(-int(s) // self.block_size)] for i, s in enumerate(seq_cpu)]
            used = torch.cat(owned)
            block_range = (int(used.min()), int(used.max()))
        same = self.query_start_loc.device.type == "cpu"  # on CPU a device tensor is its host copy

        def device(cpu_part, full):
            return cpu_part if same else full[first:end]

        return CommonBatchMetadata(
            num_seqs=end - first,
            num_decodes=max(0, min(self.num_decodes, end) - first),
            num_tokens=row1 - row0,
            max_query_len=int((qsl_cpu[1:] - qsl_cpu[:-1]).max()),
            max_seq_len=int(seq_cpu.max()),
            block_size=self.block_size,
            query_start_loc=qsl_cpu if same else self.query_start_loc[first:end + 1] - row0,
            seq_lens=device(seq_cpu, self.seq_lens),
            context_lens=device(self.context_lens_cpu[first:end], self.context_lens),
            state_slots=device(self.state_slots_cpu[first:end], self.state_slots),
            block_table=device(table_cpu, self.block_table),
            slot_mapping=self.slot_mapping[row0:row1] if self.slot_mapping.numel() else self.slot_mapping,
            query_start_loc_cpu=qsl_cpu,
            seq_lens_cpu=seq_cpu,
            context_lens_cpu=self.context_lens_cpu[first:end],
            state_slots_cpu=self.state_slots_cpu[first:end],
            block_table_cpu=table_cpu,
            block_range=block_range,
        )

    @classmethod
    def build(
        cls,
        query_lens: Sequence[int],
        context_lens: Sequence[int],
        state_slots: Sequence[int],
        block_tables: Sequence[Sequence[int]],
        block_size: int,
        device: str | torch.device = "cpu",
        pad_block: int = 0,
    ) -> "CommonBatchMetadata":
        """Metadata for one step from plain lists (used by the runner, tests and the kit).

        ``block_tables[i]`` lists the blocks of sequence ``i`` in order; it must
        cover ``context_lens[i] + query_lens[i]`` tokens. When every table is
        empty (a model with no paged state) ``slot_mapping`` is empty.
        ``pad_block``: the block id that pads shorter rows of the table (the
        kit pads with a real block other than 0 in one case, as an engine may).
        """
        n = len(query_lens)
        if not (len(context_lens) == len(state_slots) == len(block_tables) == n):
            raise ValueError("query_lens, context_lens, state_slots and block_tables must have one entry per sequence")
        if any(q < 1 for q in query_lens) or any(c < 0 for c in context_lens):
            raise ValueError("every sequence needs at least one new token and a context length >= 0")
        is_decode = [q == 1 and c > 0 for q, c in zip(query_lens, context_lens)]
        num_decodes = sum(is_decode)
        if any(is_decode[num_decodes:]):
            raise ValueError("decodes (one new token after earlier context) must come before prefills")
        seq_lens = [q + c for q, c in zip(query_lens, context_lens)]
        max_blocks = max([len(t) for t in block_tables] + [1])
        slot_mapping: list[int] = []
        paged = any(len(t) for t in block_tables)  # a model without paged state passes no blocks
        used_blocks: list[int] = []
        for i, (blocks, c, s) in enumerate(zip(block_tables, context_lens, seq_lens)):
            if not paged:
                break
            if len(blocks) * block_size < s:
                raise ValueError(f"sequence {i} holds {s} tokens but its {len(blocks)} blocks of {block_size} hold fewer")
            used_blocks.extend(blocks[: -(-s // block_size)])
            slot_mapping.extend(blocks[p // block_size] * block_size + p % block_size for p in range(c, s))
        # one tensor from padded lists, not a tensor and a copy per sequence: one call, whatever the batch
        table = (torch.tensor([list(t) + [pad_block] * (max_blocks - len(t)) for t in block_tables], dtype=torch.int32)
                 if paged else torch.zeros((n, max_blocks), dtype=torch.int32))
        qsl = torch.tensor([0, *accumulate(query_lens)], dtype=torch.int32)
        seq_cpu = torch.tensor(seq_lens, dtype=torch.int32)
        ctx_cpu = torch.tensor(list(context_lens), dtype=torch.int32)
        slots_cpu = torch.tensor(list(state_slots), dtype=torch.int32)
        return cls(
            num_seqs=n,
            num_decodes=num_decodes,
            num_tokens=sum(query_lens),
            max_query_len=max(query_lens, default=0),
            max_seq_len=max(seq_lens, default=0),
            block_size=block_size,
            query_start_loc=qsl.to(device),
            seq_lens=seq_cpu.to(device),
            context_lens=ctx_cpu.to(device),
            state_slots=slots_cpu.to(device),
            block_table=table.to(device),
            slot_mapping=torch.tensor(slot_mapping, dtype=torch.int64, device=device),
            query_start_loc_cpu=qsl,
            seq_lens_cpu=seq_cpu,
            context_lens_cpu=ctx_cpu,
            state_slots_cpu=slots_cpu,
            block_table_cpu=table,
            block_range=(min(used_blocks), max(used_blocks)) if used_blocks else (0, -1),
        )
