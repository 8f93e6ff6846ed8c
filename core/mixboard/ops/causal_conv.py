"""Depthwise causal conv over a ragged batch, with the conv state in slots.

For channel c and a sequence's token at position t:

    out[t, c] = bias[c] + sum_k weight[c, k] * in[t - (W - 1) + k, c]

where positions before the sequence's first new token come from its saved
state (the last W - 1 inputs, oldest first), or are zero for a sequence
whose ``context_lens`` is 0. After the step each sequence's state holds its
last W - 1 inputs.

All sequences are done in one ``conv1d``: each sequence's W - 1 state
columns are laid before its tokens in one extended row; windows that cross
from one sequence into the next are computed and dropped. The index tensors
depend only on the step's metadata and W, so ``ConvIndex`` is built once per
step and shared by every layer of a group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .slots import SlotRecords, gather_slots, scatter_slots


@dataclass
class ConvIndex:
    width: int
    num_seqs: int
    ext_len: int
    x_pos: torch.Tensor  # [T] where each token sits in the extended row
    out_pos: torch.Tensor  # [T] the conv output position of each token's window
    state_pos: torch.Tensor  # [N * (W - 1)] where each sequence's initial state sits
    final_pos: torch.Tensor  # [N * (W - 1)] where each sequence's last W - 1 inputs sit
    slots: torch.Tensor  # [N] state slot per sequence
    fresh: torch.Tensor  # [N] bool: starts from zeros (no context)

    @classmethod
    def build(cls, meta, width: int) -> "ConvIndex":
        n, keep = meta.num_seqs, width - 1
        device = meta.query_start_loc.device
        qsl = meta.query_start_loc_cpu.long()
        query_lens = qsl[1:] - qsl[:-1]
        seq_ids = torch.repeat_interleave(torch.arange(n), query_lens)
        tokens = torch.arange(meta.num_tokens)
        x_pos = tokens + keep * (seq_ids + 1)  # each sequence shifted by the states before and including its own
        seq_start = qsl[:-1] + keep * torch.arange(n)  # where a sequence's state begins in the row
        offsets = torch.arange(keep)
        state_pos = (seq_start[:, None] + offsets).reshape(-1)
        final_pos = ((seq_start + query_lens)[:, None] + offsets).reshape(-1)
        return cls(
            width=width, num_seqs=n, ext_len=meta.num_tokens + n * keep,
            x_pos=x_pos.to(device), out_pos=(x_pos - keep).to(device),
            state_pos=state_pos.to(device), final_pos=final_pos.to(device),
            slots=meta.state_slots, fresh=(meta.context_lens_cpu == 0).to(device),
        )


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, conv_state: torch.Tensor,
                  index: ConvIndex, activation: str | None = None) -> torch.Tensor:
    """x: [T, D] packed tokens; weight: [D, W]; bias: [D] or None;
    conv_state: the pool [S, D, W - 1], read and updated in place.
    Returns [T, D], with ``silu`` applied when ``activation == "silu"``."""
    ext = extend(x, conv_state, index)
    # The conv as W multiply-adds of shifted row slices of ext: row j of the
    # result is the window ext[j : j + W]. Contiguous [rows, D] slices keep the
    # work vectorized over channels; a depthwise F.conv1d over the same
    # channel-last row is slower on CPU.
    keep, rows = index.width - 1, index.ext_len - index.width + 1
    out = ext[keep:] * weight[:, keep] if bias is None else torch.addcmul(bias, ext[keep:], weight[:, keep])
    for k in range(keep):
        out.addcmul_(ext[k:k + rows], weight[:, k])
    out = out.index_select(0, index.out_pos)
    save_final_state(ext, conv_state, index)
    return F.silu(out, inplace=True) if activation == "silu" else out


def causal_conv1d_step(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, conv_state: torch.Tensor,
                       slots: torch.Tensor, activation: str | None = None,
                       slot_range: tuple[int, int] | None = None) -> torch.Tensor:
    """One new token per sequence (a batch of decodes): no conv over a sequence.

    x: [N, D]; conv_state: the pool [S, D, W - 1]; slots: [N] int64, each
    sequence's record, which shifts by one (the oldest input dropped, x
    appended); slot_range: (first, stop) when the slots are consecutive
    (``slots.consecutive``), to update the records in place. Whole [N, D]
    multiply-adds rather than ops over the tiny last axis, which are several
    times slower on CPU."""
    saved = SlotRecords(conv_state, slots, slot_range)
    state = saved.records  # [N, D, W-1], oldest first
    keep = state.shape[-1]
    # The window [N, W, D] channel-last, made by one copy: the record's columns
    # (stride W-1) are read once, not once per tap and again for the shift.
    window = torch.cat([state.transpose(1, 2), x.unsqueeze(1).to(state.dtype)], dim=1)
    out = x * weight[:, keep] if bias is None else torch.addcmul(bias, x, weight[:, keep])
    for k in range(keep):
        out.addcmul_(window[:, k].to(x.dtype), weight[:, k])
    saved.store(window[:, 1:].transpose(1, 2))
    return F.silu(out, inplace=True) if activation == "silu" else out


def extend(x: torch.Tensor, conv_state: torch.Tensor, index: ConvIndex) -> torch.Tensor:
    """The extended row [ext_len, D]: each sequence's initial state (zeros
    when fresh) followed by its tokens. A backend with its own conv kernel
    convolves this row (token windows never leave their sequence), then
    calls ``save_final_state``."""
    keep, n, dim = index.width - 1, index.num_seqs, x.shape[1]
    ext = x.new_empty(index.ext_len, dim)
    initial = gather_slots(conv_state, index.slots, index.fresh)  # [N, D, W-1]
    ext[index.state_pos] = initial.to(x.dtype).transpose(1, 2).reshape(n * keep, dim)
    ext[index.x_pos] = x
    return ext


def save_final_state(ext: torch.Tensor, conv_state: torch.Tensor, index: ConvIndex) -> None:
    """Write each sequence's last W - 1 inputs from the extended row to its slot."""
    keep, n = index.width - 1, index.num_seqs
    final = ext.index_select(0, index.final_pos).view(n, keep, ext.shape[1]).transpose(1, 2)
    scatter_slots(conv_state, index.slots, final)
