"""Test double of causal-conv1d 1.5: causal_conv1d_fn and causal_conv1d_update."""

import torch
import torch.nn.functional as F

__version__ = "1.5.2"

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _require(condition, message):
    if not condition:
        raise RuntimeError(f"causal_conv1d double: {message}")


def _activate(out, activation):
    _require(activation in (None, "silu", "swish"), "activation must be None, silu, or swish")
    return out if activation is None else F.silu(out)


def _weights(weight, bias, dim):
    _require(weight.dtype in FLOATS, "weight must be float32, float16 or bfloat16")
    _require(weight.shape[0] == dim and 2 <= weight.shape[1] <= 4, "weight must be (dim, width) with width 2 to 4")
    if bias is not None:
        _require(bias.dtype == weight.dtype and tuple(bias.shape) == (dim,), "bias must be (dim,) in weight's dtype")


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None, return_final_states=False,
                     final_states_out=None, activation=None):
    """x: (batch, dim, seqlen); weight: (dim, width); bias: (dim,);
    initial_states: (batch, dim, width - 1); returns out (batch, dim, seqlen)
    [and final_states (batch, dim, width - 1)] in x's dtype."""
    _require(x.dtype in FLOATS, "x must be float32, float16 or bfloat16")
    batch, dim, seqlen = x.shape
    _weights(weight, bias, dim)
    width = weight.shape[1]
    _require(x.stride(2) == 1 or x.stride(1) == 1, "x must be contiguous along dim or seqlen")
    channel_last = x.stride(1) == 1 and x.stride(2) > 1
    if channel_last:
        _require(dim % 8 == 0, "channel-last layout needs dim divisible by 8")
    _require(seq_idx is None, "seq_idx is not implemented by this double")
    if initial_states is not None:
        _require(channel_last, "initial_states is only supported for channel last layout")
        _require(initial_states.dtype == x.dtype, "initial_states must have x's dtype")
        _require(tuple(initial_states.shape) == (batch, dim, width - 1), "initial_states must be (batch, dim, width - 1)")
        _require(initial_states.stride(1) == 1, "initial_states must be channel last")
    if return_final_states:
        _require(channel_last, "final_states is only supported for channel last layout")
    _require(final_states_out is None, "final_states_out is not implemented by this double")
    prev = initial_states if initial_states is not None else x.new_zeros(batch, dim, width - 1)
    full = torch.cat([prev, x], dim=-1).to(weight.dtype)
    out = _activate(_conv(full, weight, bias), activation).to(x.dtype)
    if not return_final_states:
        return out
    return out, full[:, :, -(width - 1):].to(x.dtype)


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None):
    """x: (batch, dim) or (batch, dim, seqlen); conv_state: (batch, dim, state_len),
    or (entries, dim, state_len) with conv_state_indices (batch,) int32 naming
    each row's entry. Updates conv_state in place; returns out like x."""
    _require(x.dtype in FLOATS and conv_state.dtype == x.dtype, "conv_state must have x's dtype")
    squeeze = x.dim() == 2
    if squeeze:
        x = x.unsqueeze(-1)
    batch, dim, seqlen = x.shape
    _weights(weight, bias, dim)
    width, state_len = weight.shape[1], conv_state.shape[2]
    _require(state_len >= width - 1, "conv_state is shorter than width - 1")
    _require(cache_seqlens is None, "cache_seqlens is not implemented by this double")
    if conv_state_indices is not None:
        _require(conv_state_indices.dtype == torch.int32, "conv_state_indices must be int32")
        _require(tuple(conv_state_indices.shape) == (batch,) and conv_state_indices.stride(0) == 1,
                 "conv_state_indices must be a contiguous (batch,) tensor")
        _require(conv_state.shape[1] == dim, "conv_state must be (entries, dim, state_len)")
        rows = conv_state_indices.long()
    else:
        _require(tuple(conv_state.shape[:2]) == (batch, dim), "conv_state must be (batch, dim, state_len)")
        rows = torch.arange(batch, device=x.device)
    full = torch.cat([conv_state[rows], x], dim=-1)
    conv_state[rows] = full[:, :, -state_len:]
    out = _conv(full, weight, bias)[:, :, -seqlen:]
    out = _activate(out, activation).to(x.dtype)
    return out.squeeze(-1) if squeeze else out


def _conv(full, weight, bias):
    """The depthwise conv summed in float32, as the kernels sum it whatever the inputs' dtype."""
    return F.conv1d(full.float(), weight.float().unsqueeze(1), None if bias is None else bias.float(),
                    groups=full.shape[1])
