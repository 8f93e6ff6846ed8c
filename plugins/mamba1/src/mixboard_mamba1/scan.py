"""Mamba1's selective scan over one sequence, without a Python step per token.

The recurrence, per channel d and state n::

    h[t] = exp(dt[t, d] * A[d, n]) * h[t-1] + dt[t, d] * u[t, d] * B[t, n]
    y[t, d] = sum_n C[t, n] * h[t, d, n]

is linear in the state, so a sequence is cut into K chunks of Lc tokens and
the scan runs in three steps (a two-level scan):

1. every chunk from a zero state, all K chunks at once: Lc - 1 Python steps
   over [K, d_state, d_inner] slices; alongside, the running decay P[t] (the
   product of exp(dt * A) since the chunk began);
2. the states at chunk boundaries: s[k+1] = P[end of k] * s[k] + h[end of k],
   K small steps;
3. the true states: h[t] = h_zero[t] + P[t] * s[chunk of t], then y by one
   batched matmul with C.

Every exponent is dt * A <= 0, so nothing overflows and nothing is divided:
this is the plain recurrence reassociated, exact in float32 (no
exp(-cumsum) tricks, whose error grows with the chunk's total decay).
Python steps per block are about Lc + K instead of Lc * K. Long sequences
are done in blocks whose work tensors stay a few MB, reused from block to
block. Inside, states are [d_state, d_inner]: the long axis innermost, so
the elementwise work and the contraction with C vectorize along it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# Elements of one [tokens, d_state, d_inner] work tensor per block (1M floats = 4 MB: the
# block's two work tensors stay in cache; bigger blocks measured slower on this CPU).
BLOCK_ELEMENTS = 1 << 20
MAX_CHUNK = 32
LOG2E = 1.4426950408889634


def chunk_length(tokens: int) -> int:
    """Lc ~ sqrt(tokens) minimizes the Python steps Lc + tokens / Lc."""
    return max(1, min(MAX_CHUNK, round(math.sqrt(tokens))))


class ScanWorkspace:
    """Buffers reused by every block and sequence of one forward call."""

    def __init__(self):
        self._buffers: dict[str, torch.Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        numel = math.prod(shape)
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < numel or buf.device != like.device:
            buf = self._buffers[name] = torch.empty(numel, dtype=torch.float32, device=like.device)
        return buf[:numel].view(shape)


def selective_scan(u: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                   h0: torch.Tensor, out: torch.Tensor, skip: torch.Tensor | None = None,
                   z: torch.Tensor | None = None, workspace: ScanWorkspace | None = None) -> torch.Tensor:
    """One sequence. u, dt: [L, D]; A: [D, N]; B, C: [L, N]; h0: [D, N]; skip: [D]; all float32.
    Writes y = C . h (+ skip * u where skip is given) (* silu(z) where z [L, D] is given)
    into ``out`` ([L, D], any float dtype) block by block, while each block is in cache.
    Returns the final state [D, N]."""
    length, dim = u.shape
    nstate = A.shape[1]
    ws = workspace or ScanWorkspace()
    block = max(1, BLOCK_ELEMENTS // (dim * nstate))
    block -= block % chunk_length(block)  # full blocks need no padding
    # States are kept [N, D] inside: D, the long axis, innermost. exp(dt A) is taken
    # as exp2(dt A log2(e)): the same to float32 rounding, and exp2 is the cheaper kernel.
    A_t = (A.t() * LOG2E).contiguous()
    direct = out.dtype == torch.float32 and out.is_contiguous()  # the matmul may write into out itself
    h = h0.t()
    for start in range(0, length, block):
        rows = slice(start, min(length, start + block))
        y, h = _scan_block(u[rows], dt[rows], A_t, B[rows], C[rows], h, ws, out[rows] if direct else None)
        if skip is not None:
            y.addcmul_(u[rows], skip)
        if z is not None:
            y.mul_(F.silu(z[rows].float()))
        if y.data_ptr() != out[rows].data_ptr():
            out[rows] = y
    return h.t()


def _padded(t: torch.Tensor, rows: int) -> torch.Tensor:
    """[L, F] -> [rows, F], zeros after the L tokens. A padded token has dt = 0:
    it decays nothing and adds nothing to the state."""
    if t.shape[0] == rows:
        return t
    out = t.new_zeros(rows, t.shape[1])
    out[: t.shape[0]] = t
    return out


def _scan_block(u, dt, A_t, B, C, h0, ws, y_out=None):
    """A block of one sequence: u, dt [L, D]; A_t [N, D] (A log2(e)); B, C [L, N]; h0 [N, D].
    Returns y [L, D] (in ``y_out`` where given and the block needs no padding)
    and the final state [N, D]. Work tensors are [K, Lc, N, D]: token k * Lc + j
    at [k, j], in token order."""
    length, dim = u.shape
    nstate = A_t.shape[0]
    lc = chunk_length(length)
    chunks = -(-length // lc)
    rows = chunks * lc
    dt_c = _padded(dt, rows).view(chunks, lc, 1, dim)
    dtu_c = _padded(dt * u, rows).view(chunks, lc, 1, dim)
    B_c = _padded(B, rows).view(chunks, lc, nstate, 1)

    # 1. Each chunk from a zero state, all chunks at once. P[:, j] starts as the
    #    step's decay exp(dt A) and becomes the decay since the chunk began.
    H = torch.mul(dtu_c, B_c, out=ws.get("H", (chunks, lc, nstate, dim), u))  # dt * u * B
    P = torch.mul(dt_c, A_t, out=ws.get("P", (chunks, lc, nstate, dim), u)).exp2_()
    for j in range(1, lc):
        H[:, j].addcmul_(P[:, j], H[:, j - 1])
        P[:, j].mul_(P[:, j - 1])

    # 2. The state entering each chunk.
    starts = ws.get("starts", (chunks + 1, nstate, dim), u)
    starts[0] = h0
    for k in range(chunks):
        torch.addcmul(H[k, lc - 1], P[k, lc - 1], starts[k], out=starts[k + 1])

    # 3. True states and outputs: y[t] = C[t] @ h[t], [1, N] @ [N, D] per token.
    H.addcmul_(P, starts[:chunks].unsqueeze(1))
    y = y_out.view(rows, 1, dim) if y_out is not None and rows == length else ws.get("y", (rows, 1, dim), u)
    torch.bmm(_padded(C, rows).view(rows, 1, nstate), H.view(rows, nstate, dim), out=y)
    return y.view(rows, dim)[:length], starts[chunks].clone()
