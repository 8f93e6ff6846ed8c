"""Test double of causal-conv1d (Dao-AILab, PyPI ``causal-conv1d`` 1.5-1.7).

Exactly the two functions short_conv_cuda calls, in plain torch, with the
semantics their docstrings and reference code in the library document, and
the argument checks its C++ entry points enforce (csrc/causal_conv1d.cpp),
minus "is_cuda": so that the plugin's argument plumbing (layouts, dtypes,
index tensors) is exercised on CPU. Arguments short_conv_cuda never passes
(seq_idx, initial_states, final states, cache_seqlens) raise, so a change
that starts passing them fails loudly instead of being half-simulated.

Calls are counted in ``CALLS`` so tests can tell which path ran.
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.nn.functional as F

__version__ = "1.7.0"

CALLS: Counter = Counter()
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise RuntimeError(f"causal_conv1d double: {message}")


def _check_common(x, weight, bias, activation):
    _check(activation in (None, "silu", "swish"), "activation must be None, silu, or swish")
    _check(x.dtype in _FLOATS and weight.dtype in _FLOATS, "x and weight must be float32, float16 or bfloat16")
    _check(weight.dim() == 2 and weight.shape[0] == x.shape[1], f"weight must have shape (dim, width), got {tuple(weight.shape)}")
    _check(2 <= weight.shape[1] <= 4, "causal_conv1d only supports width between 2 and 4")
    if bias is not None:
        _check(bias.dtype == weight.dtype, "bias must have the weight's dtype")
        _check(bias.shape == (x.shape[1],) and bias.stride(-1) == 1, "bias must be a contiguous (dim,) tensor")


def _finish(out32: torch.Tensor, activation, like: torch.Tensor) -> torch.Tensor:
    if activation is not None:
        out32 = F.silu(out32)
    out = torch.empty_like(like)  # the library allocates out with empty_like(x): x's layout
    out.copy_(out32)
    return out


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None, return_final_states=False,
                     final_states_out=None, activation=None):
    """x: (batch, dim, seqlen); weight: (dim, width); bias: (dim,).
    out[b, c, t] = bias[c] + sum_k weight[c, k] * x[b, c, t - (width - 1) + k], zeros before t = 0."""
    CALLS["causal_conv1d_fn"] += 1
    _check(seq_idx is None and initial_states is None and not return_final_states and final_states_out is None,
           "this double implements only causal_conv1d_fn(x, weight, bias, activation=...)")
    _check(x.dim() == 3, f"x must be (batch, dim, seqlen), got {tuple(x.shape)}")
    _check_common(x, weight, bias, activation)
    _check(x.stride(2) == 1 or x.stride(1) == 1, "x must be contiguous along seqlen or along dim")
    if x.stride(1) == 1 and x.stride(2) > 1:  # channel-last kernel
        _check(x.shape[1] % 8 == 0, "causal_conv1d only supports channel dimension divisible by 8 for now")
        _check(x.stride(2) % 8 == 0 and x.stride(0) % 8 == 0,
               "causal_conv1d with channel last layout requires strides (x.stride(0) and x.stride(2)) to be multiples of 8")
    width = weight.shape[1]
    # The kernel reads weights as float and accumulates in float.
    out = F.conv1d(x.float(), weight.float().unsqueeze(1), None if bias is None else bias.float(),
                   padding=width - 1, groups=x.shape[1])[..., : x.shape[2]]
    return _finish(out, activation, x)


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None):
    """x: (batch, dim) or (batch, dim, seqlen); conv_state: (entries, dim, state_len),
    state_len >= width - 1, updated in place; conv_state_indices: (batch,) int32,
    which record of conv_state batch row b uses (negative: a padding row, output zeros).
    Each row's window is its state followed by x; the state keeps the last state_len columns."""
    CALLS["causal_conv1d_update"] += 1
    _check(cache_seqlens is None, "this double does not implement cache_seqlens (circular buffer)")
    squeeze = x.dim() == 2
    if squeeze:
        x = x.unsqueeze(-1)
    _check(x.dim() == 3, f"x must be (batch, dim) or (batch, dim, seqlen), got {tuple(x.shape)}")
    _check_common(x, weight, bias, activation)
    _check(conv_state.dtype == x.dtype, f"conv_state must have x's dtype {x.dtype}, got {conv_state.dtype}")
    batch, dim, seqlen = x.shape
    width, state_len = weight.shape[1], conv_state.shape[2]
    _check(state_len >= width - 1, "conv_state must hold at least width - 1 columns")
    if conv_state_indices is None:
        _check(tuple(conv_state.shape) == (batch, dim, state_len), "conv_state must be (batch, dim, state_len)")
        rows = torch.arange(batch)
    else:
        _check(conv_state_indices.dtype == torch.int32, "conv_state_indices must be int32")
        _check(conv_state_indices.shape == (batch,) and conv_state_indices.stride(0) == 1,
               "conv_state_indices must be a contiguous (batch,) tensor")
        _check(conv_state.dim() == 3 and conv_state.shape[1] == dim, "conv_state must be (entries, dim, state_len)")
        rows = conv_state_indices.long().cpu()
    out32 = torch.zeros(batch, dim, seqlen, dtype=torch.float32, device=x.device)
    for b, row in enumerate(rows.tolist()):
        if row < 0:
            continue  # padding row: output stays zero, no state touched
        window = torch.cat([conv_state[row], x[b]], dim=-1)  # (dim, state_len + seqlen)
        conv_state[row] = window[:, -state_len:]
        full = F.conv1d(window.float().unsqueeze(0), weight.float().unsqueeze(1),
                        None if bias is None else bias.float(), groups=dim)[0]
        out32[b] = full[:, -seqlen:]
    out = _finish(out32, activation, x)
    return out.squeeze(-1) if squeeze else out
