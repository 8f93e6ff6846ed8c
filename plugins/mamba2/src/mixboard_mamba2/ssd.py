"""Mamba-2's SSD scan in plain PyTorch: a chunked prefill and a batched decode step.

Notation (all float32): a sequence of L tokens, H heads of P channels, G
groups sharing B and C of N states; ``dt`` already softplus'ed and clamped;
``dA = dt * A`` is the log-decay of each token. Per head::

    h_t = exp(dA_t) * h_{t-1} + dt_t * x_t (outer) B_t        # [P, N]
    y_t = h_t @ C_t

The prefill splits the sequence into chunks of Q tokens. Inside a chunk the
recurrence unrolls into a masked matrix product (the "attention-like" dual):

    y_i = sum_{j <= i} exp(dA_{j+1} + ... + dA_i) * (C_i . B_j) * dt_j x_j
          + exp(dA_1 + ... + dA_i) * (h_start @ C_i)

and chunks pass their end states on in a short loop over chunks (never over
tokens). The decay between two positions is built from short sums of
same-signed log-decays (``_decay``), never as the difference of two long
prefix sums, which would lose float32 precision when decays are large.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from mixboard.ops.slots import SlotRecords


def discretize(dt: torch.Tensor, dt_bias: torch.Tensor, dt_min: float, dt_max: float) -> torch.Tensor:
    """dt [T, H] (any float dtype) -> clamp(softplus(dt + dt_bias), dt_min, dt_max) in float32."""
    out = F.softplus(dt.float() + dt_bias.float())
    if dt_min > 0.0 or dt_max != float("inf"):
        out = out.clamp(min=dt_min, max=dt_max)
    return out


@lru_cache(maxsize=64)
def _masks(q: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(not strictly lower, not lower) triangular [q, q] masks, made once per size and device."""
    lower = torch.ones(q, q, dtype=torch.bool, device=device).tril()
    return ~lower.tril(-1), ~lower


def _segment_sums(dA: torch.Tensor) -> torch.Tensor:
    """dA [..., Q] -> [..., Q, Q] with [i, j] = dA[j+1] + ... + dA[i] for i >= j, else -inf."""
    q = dA.shape[-1]
    not_strict, upper = _masks(q, dA.device)
    sums = dA.unsqueeze(-1).expand(*dA.shape, q).masked_fill(not_strict, 0.0).cumsum(-2)
    return sums.masked_fill_(upper, float("-inf"))


BLOCK = 16  # sub-block of the decay matrix (see _decay)


def _decay(dA: torch.Tensor) -> torch.Tensor:
    """exp(segment sums) [..., Q, Q]: [i, j] = exp(dA[j+1] + ... + dA[i]) for i >= j, else 0.

    Summing a Q x Q matrix of segments directly costs a Q x Q cumsum; instead,
    for i in block I and j in an earlier block J (blocks of BLOCK tokens) the
    decay factors as exp(to i within I) * exp(blocks strictly between)
    * exp(after j within J): three factors <= 1, each from a short sum, so
    precision does not depend on the chunk's length, and the full matrix
    costs one broadcast product. Blocks on the diagonal are summed directly.
    """
    *lead, q = dA.shape
    if q % BLOCK or q <= BLOCK:
        return torch.exp(_segment_sums(dA))
    nb = q // BLOCK
    blocks = dA.view(*lead, nb, BLOCK)
    into = blocks.cumsum(-1)  # from the block's start through i
    after = F.pad(blocks.flip(-1).cumsum(-1).flip(-1)[..., 1:], (0, 1))  # after j to the block's end
    between = torch.full((*lead, nb, nb), float("-inf"), dtype=dA.dtype, device=dA.device)
    between[..., 1:, :] = _segment_sums(into[..., -1])[..., :-1, :]  # [I, J]: blocks J+1 .. I-1; -inf for J >= I
    left = into.exp()[..., :, :, None, None] * between.exp()[..., :, None, :, None]  # [.., nb, b, nb, 1]
    decay = left * after.exp()[..., None, None, :, :]  # [.., nb, b, nb, b]
    decay.diagonal(dim1=-4, dim2=-2).copy_(torch.exp(_segment_sums(blocks)).movedim(-3, -1))
    return decay.view(*lead, q, q)


def ssd_prefill(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                chunk_size: int, initial: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence. x [L, H, P]; dt [L, H]; A [H]; B, C [L, G, N]; initial
    [H, P, N] or None (zeros). All float32. Returns (y [L, H, P] without the
    D skip, final state [H, P, N])."""
    L, H, P = x.shape
    G, N = B.shape[1:]
    hg = H // G
    Q = min(chunk_size, -(-L // BLOCK) * BLOCK)  # a short sequence is one chunk, rounded up to whole blocks
    nc = -(-L // Q)
    pad = nc * Q - L  # padded tokens have dA = 0 and B = 0: they neither decay nor add to the state

    def chunked(t: torch.Tensor) -> torch.Tensor:  # [L, ...] -> [nc, Q, ...]
        return F.pad(t, (0, 0) * (t.dim() - 1) + (0, pad)).view(nc, Q, *t.shape[1:])

    dA = chunked(dt * A).permute(2, 0, 1)  # [H, nc, Q]
    xdt = chunked(x * dt.unsqueeze(-1))  # [nc, Q, H, P]
    Bc, Cc = chunked(B).permute(2, 0, 1, 3), chunked(C).permute(2, 0, 1, 3)  # [G, nc, Q, N]
    cum = dA.cumsum(-1)  # decay from the chunk start through each token

    # 1. Within chunks: y_i += sum_j decay[i, j] (C_i . B_j) xdt_j, per head.
    scores = _decay(dA).view(G, hg, nc, Q, Q).mul_((Cc @ Bc.transpose(-1, -2)).unsqueeze(1))
    xdt_heads = xdt.permute(2, 0, 1, 3).reshape(G, hg, nc, Q, P)
    y = scores @ xdt_heads  # [G, hg, nc, Q, P]
    del scores

    # 2. Each chunk's own contribution to its end state: sum_j exp(dA_{j+1..Q}) xdt_j (outer) B_j.
    to_end = torch.exp(F.pad(dA.flip(-1).cumsum(-1).flip(-1)[..., 1:], (0, 1)))  # [H, nc, Q]
    weighted = xdt_heads.mul_(to_end.view(G, hg, nc, Q, 1)).permute(0, 2, 1, 4, 3).reshape(G, nc, hg * P, Q)
    chunk_states = (weighted @ Bc).view(G, nc, hg, P, N).permute(1, 0, 2, 3, 4).reshape(nc, H, P, N)

    # 3. Between chunks: carry the state through (a loop over chunks, not tokens).
    chunk_decay = torch.exp(cum[..., -1]).t().reshape(nc, H, 1, 1)
    states = x.new_empty(nc + 1, H, P, N)  # [c]: the state chunk c starts from; [nc]: the final state
    if initial is None:
        states[0].zero_()
    else:
        states[0].copy_(initial)
    for c in range(nc):
        torch.addcmul(chunk_states[c], chunk_decay[c], states[c], out=states[c + 1])
    start_states, state = states[:nc], states[nc]

    # 4. The state each chunk starts from, seen through C_i and decayed to token i.
    from_start = start_states.view(nc, G, hg * P, N).permute(1, 0, 3, 2)  # [G, nc, N, hg * P]
    y_prev = (Cc @ from_start).view(G, nc, Q, hg, P).permute(0, 3, 1, 2, 4)  # [G, hg, nc, Q, P]
    y.addcmul_(y_prev, torch.exp(cum).view(G, hg, nc, Q, 1))
    y = y.reshape(H, nc * Q, P)[:, :L].transpose(0, 1)
    return y, state


def ssd_prefill_batch(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, n: int,
                      chunk_size: int, initial: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences of one length, packed one after another: x [n * L, H, P],
    dt [n * L, H], B, C [n * L, G, N], initial [n, H, P, N] or None. Returns
    (y [n * L, H, P], final states [n, H, P, N]).

    Heads never mix in the scan, so the n sequences run as one sequence of
    n * H heads in n * G groups: one call of few large products instead of n
    calls of many small ones."""
    if n == 1:
        y, state = ssd_prefill(x, dt, A, B, C, chunk_size, None if initial is None else initial[0])
        return y, state.unsqueeze(0)
    T, H, P = x.shape
    L = T // n

    def as_heads(t: torch.Tensor) -> torch.Tensor:  # [n * L, K, ...] -> [L, n * K, ...]
        return t.view(n, L, *t.shape[1:]).transpose(0, 1).reshape(L, n * t.shape[1], *t.shape[2:])

    y, state = ssd_prefill(as_heads(x), as_heads(dt), A.repeat(n), as_heads(B), as_heads(C), chunk_size,
                           None if initial is None else initial.reshape(n * H, *initial.shape[2:]))
    y = y.view(L, n, H, P).transpose(0, 1).reshape(T, H, P)
    return y, state.view(n, H, *state.shape[1:])


# Bytes of the chunk-by-chunk products a batch of prefills may take at once (see prefill_runs).
PREFILL_BATCH_BYTES = 64 << 20


def prefill_runs(prefills, bytes_per_token: int) -> list[list]:
    """Consecutive prefills of one length, in runs that ``ssd_prefill_batch``
    takes at once; a run's scan needs about ``bytes_per_token`` per token
    (heads x chunk x 4 bytes for the decay and score matrices)."""
    runs: list[list] = []
    budget = max(1, PREFILL_BATCH_BYTES // max(1, bytes_per_token))
    for p in prefills:
        length = p.end - p.start
        last = runs[-1] if runs else None
        if last and last[-1].end - last[-1].start == length and (len(last) + 1) * length <= budget:
            last.append(p)
        else:
            runs.append([p])
    return runs


# Bytes of SSM state one batched decode update works on: small enough to stay in
# cache between its three passes (scale, rank-1 add, read-out), so each state
# crosses the memory bus about twice, once in and once out.
DECODE_STATE_BYTES = 4 << 20


def ssd_decode(ssm_pool: torch.Tensor, slots: torch.Tensor, slot_range: tuple[int, int] | None, x: torch.Tensor,
               dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """One token for each of n sequences, updating their records in ``ssm_pool``
    ([S, H, P, N]) at ``slots`` ([n] int64; ``slot_range`` (first, stop) when
    they are consecutive). x [n, H, P]; dt [n, H]; A [H]; B, C [n, G, N];
    float32. Returns y [n, H, P] without the D skip.

    The update is bound by reading and writing the states: consecutive records
    are read and written in place in the pool (no gather, no scatter), and
    decodes go in batches whose states fit in cache (DECODE_STATE_BYTES), so
    that the read for y finds them there. y is [1, N] @ [N, rows] per group
    (the state seen transposed): a long output axis, several times faster on
    CPU than [rows, N] @ [N, 1].
    """
    n, H, P = x.shape
    G, N = B.shape[1:]
    rows = H // G * P  # the state rows that share one group's B and C
    decay = torch.exp(dt * A).view(n, H, 1, 1)
    xdt = (x * dt.unsqueeze(-1)).view(n * G, rows, 1)
    Bf, Cf = B.reshape(n * G, 1, N), C.reshape(n * G, 1, N)
    y = x.new_empty(n * G, 1, rows)
    per = max(1, DECODE_STATE_BYTES // (H * P * N * 4))
    # In place where a slice of the pool views as [sequences * G, rows, N]: records back to back, or one group
    # (records that sit apart in larger pages, an engine's hybrid cache, cannot fold sequences into groups).
    in_place = slot_range is not None and (G == 1 or ssm_pool.is_contiguous())
    for a in range(0, n, per):
        b = min(n, a + per)
        saved = SlotRecords(ssm_pool, slots[a:b], (slot_range[0] + a, slot_range[0] + b) if in_place else None)
        state = saved.records if saved.records.dtype == torch.float32 else saved.records.float()
        state.mul_(decay[a:b])
        flat = state.view((b - a) * G, rows, N)
        flat.addcmul_(xdt[a * G:b * G], Bf[a * G:b * G])
        torch.matmul(Cf[a * G:b * G], flat.transpose(1, 2), out=y[a * G:b * G])
        saved.store(state)
    return y.view(n, H, P)
