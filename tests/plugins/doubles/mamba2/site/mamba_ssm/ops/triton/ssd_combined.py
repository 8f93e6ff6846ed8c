"""Double of mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined.

Semantics (mamba-ssm 2.3): per batch row, per head h of group g = h // (nheads / ngroups):

    dt  = clamp(softplus(dt + dt_bias) if dt_softplus else dt + dt_bias, *dt_limit)
    h_t = exp(dt_t[h] * A[h]) h_{t-1} + dt_t[h] x_t[h] (outer) B_t[g]
    y_t = h_t @ C_t[g] + D[h] x_t[h];   y_t *= silu(z_t) when z is given

h starts from initial_states[b] (zeros without). With seq_idx, the state is
reset to zeros where seq_idx changes: packed sequences never see each other.
chunk_size only shapes the real kernel's work, not the result.

Returns out (x's dtype); with return_final_states also the state after each
row's last token (float32, [batch, nheads, headdim, dstate]); with
return_varlen_states (batch 1, cu_seqlens given) also each sequence's state
after its last token ([num_seqs, ...], C's dtype).

mamba-ssm 2.3's varlen states (chunk_state_varlen) leave initial_states out
when the first sequence fits in one chunk, so the double refuses
initial_states together with return_varlen_states instead of guessing.
"""

import torch
import torch.nn.functional as F

from mamba_ssm import CALLS


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None,
                              seq_idx=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False):
    batch, seqlen, nheads, headdim = x.shape
    _, _, ngroups, dstate = B.shape
    assert nheads % ngroups == 0
    assert B.shape == (batch, seqlen, ngroups, dstate) and C.shape == B.shape
    assert dt.shape == (batch, seqlen, nheads)
    assert A.shape == (nheads,)
    assert isinstance(chunk_size, int) and chunk_size > 0
    if z is not None:
        assert z.shape == x.shape
    if D is not None:
        assert D.shape in ((nheads, headdim), (nheads,))
    if dt_bias is not None:
        assert dt_bias.shape == (nheads,)
    if seq_idx is not None:
        assert seq_idx.shape == (batch, seqlen) and not seq_idx.is_floating_point()
    if initial_states is not None:
        assert initial_states.shape == (batch, nheads, headdim, dstate)
    if return_varlen_states:
        assert cu_seqlens is not None, "cu_seqlens must be provided if return_varlen_states is True"
        assert batch == 1, "passing cu_seqlens to get the varlen states is only supported if batch dimension is 1"
        assert int(cu_seqlens[0]) == 0 and int(cu_seqlens[-1]) == seqlen
        assert initial_states is None, "double: mamba-ssm 2.3 drops initial_states from varlen states"
    CALLS.append(("mamba_chunk_scan_combined", dict(
        batch=batch, seqlen=seqlen, chunk_size=chunk_size, has_initial=initial_states is not None,
        seq_idx=None if seq_idx is None else seq_idx.tolist(), cu_seqlens=None if cu_seqlens is None else
        cu_seqlens.tolist(), dt_softplus=dt_softplus, dt_limit=tuple(dt_limit), return_final_states=return_final_states,
        return_varlen_states=return_varlen_states, has_z=z is not None)))

    heads_per_group = nheads // ngroups
    dt = dt.float()
    if dt_bias is not None:
        dt = dt + dt_bias.float()
    if dt_softplus:
        dt = F.softplus(dt)  # linear above 20, as the kernel
    dt = dt.clamp(min=dt_limit[0], max=dt_limit[1])
    Bh = B.float().repeat_interleave(heads_per_group, dim=2)  # [batch, seqlen, nheads, dstate]
    Ch = C.float().repeat_interleave(heads_per_group, dim=2)
    xf = x.float()
    h = torch.zeros(batch, nheads, headdim, dstate) if initial_states is None else initial_states.float().clone()
    y = torch.empty(batch, seqlen, nheads, headdim)
    ends = set() if cu_seqlens is None else {int(e) - 1 for e in cu_seqlens[1:]}
    varlen = []
    for t in range(seqlen):
        if seq_idx is not None and t > 0:
            h = h * (seq_idx[:, t] == seq_idx[:, t - 1]).view(batch, 1, 1, 1)
        decay = torch.exp(dt[:, t] * A.float()).view(batch, nheads, 1, 1)
        h = decay * h + (dt[:, t, :, None] * xf[:, t])[..., None] * Bh[:, t, :, None, :]
        y[:, t] = (h @ Ch[:, t, :, :, None])[..., 0]
        if t in ends:
            varlen.append(h[0].clone())
    if D is not None:
        y = y + (D.float() if D.dim() == 2 else D.float()[:, None]) * xf
    if z is not None:
        y = y * F.silu(z.float())
    out = y.to(x.dtype)
    result = [out]
    if return_final_states:
        result.append(h)
    if return_varlen_states:
        result.append(torch.stack(varlen).to(C.dtype))
    return out if len(result) == 1 else tuple(result)
