"""The runner's compiled CPU kernels (``_cpu_kernels.c``), imported in this one place.

Products on panels (``models/panels.py``) and row operations of every
decode step, which torch runs as several dispatched operators each:
``rms_norm`` (F.rms_norm on CPU: ~8 operators, ~40 us a call inside a step),
``add_rms_norm`` (the residual add and the norm after it), ``rms_norm_heads_``
(in place, per head), ``rotary`` (in place, reading the cos/sin tables by position: no gathered
rows, no rotated copy) and ``argmax`` (greedy sampling over [16, 32000]:
~360 us in torch, ~70 us here); and ``huge_pages`` for the large tensors
streamed every step. The extension is optional (setup.py): where it is not
built, ``UNAVAILABLE`` says why and the runner keeps torch's operators.
"""

from __future__ import annotations

import torch  # first: the kernels then share the OpenMP runtime torch loaded (see the C file)

try:
    from . import _cpu_kernels as native
except ImportError as exc:
    native = None
    UNAVAILABLE: str | None = (f"mixboard_runner._cpu_kernels is not built ({exc}); reinstall mixboard where a C "
                               "compiler with OpenMP is present (gcc) to build it")
else:
    UNAVAILABLE = None


def serves(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether this device's and dtype's tensors go through the kernels."""
    return native is not None and torch.device(device).type == "cpu" and dtype == torch.float32


HUGE_PAGES_FROM = 4 << 20  # bytes: smaller tensors hold at most one whole 2 MB page


def huge_pages(t: torch.Tensor) -> torch.Tensor:
    """``t``, its memory backed by 2 MB pages where the OS allows it (Linux transparent huge pages);
    call before ``t`` is first written. Measured here: the LM head's products 4-7 % faster, weights
    being streamed without a page crossing every 4 KB. A no-op for small, non-CPU tensors and where
    the kernels are not built."""
    size = t.numel() * t.element_size()
    if native is not None and t.device.type == "cpu" and size >= HUGE_PAGES_FROM:
        native.huge_pages(t.data_ptr(), size)
    return t


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """F.rms_norm(x, weight.shape, weight, eps) for float32 CPU tensors (weight contiguous)."""
    dim = weight.shape[0]
    if x.dim() == 2 and x.stride(1) == 1:  # a step's rows, as the blocks pass them: no reshape, no view (~9 us)
        rows = x
    else:
        rows = x.reshape(-1, dim)
        if rows.stride(-1) != 1:
            rows = rows.contiguous()
    out = torch.empty(rows.shape[0], dim)
    native.rms_norm(rows.data_ptr(), rows.shape[0], 1, rows.stride(0), dim, weight.data_ptr(), out.data_ptr(), dim, eps)
    return out if rows is x else out.view(x.shape)


def rms_norm_heads_(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Each head of x [T, heads, D] (float32 CPU, heads contiguous: strides (any, D, 1)) replaced by
    rms_norm of it, in place: the q and k heads of a fused qkv product, with no copy out and back."""
    native.rms_norm(x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), x.shape[2], weight.data_ptr(), x.data_ptr(),
                    x.stride(0), eps)


def add_rms_norm(total: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``total += x`` in place, then rms_norm(total): a block's residual add and the next norm in one
    pass (both [rows, dim] float32 CPU, channels contiguous). The same arithmetic as the two apart."""
    dim = weight.shape[0]
    out = torch.empty(total.shape[0], dim)
    native.add_rms_norm(total.data_ptr(), total.shape[0], dim, total.stride(0), x.data_ptr(), x.stride(0),
                        weight.data_ptr(), out.data_ptr(), dim, eps)
    return out


def rotary(x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Rotate x [T, heads, D] (float32 CPU, channels contiguous) in place on its first cos.shape[1]
    channels, rotate-half convention, by rows ``positions`` (int64) of the tables (sin's first half
    negated, as blocks.Rotary builds them)."""
    positions = positions.contiguous()
    native.rotary(x.data_ptr(), x.shape[0], x.shape[1], x.stride(0), x.stride(1), cos.shape[1], cos.data_ptr(),
                  sin.data_ptr(), cos.stride(0), cos.shape[0], positions.data_ptr())


def argmax(logits: torch.Tensor) -> list[int]:
    """logits.argmax(-1).tolist() for a float32 CPU [N, vocab]."""
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    out = torch.empty(logits.shape[0], dtype=torch.int64)
    native.argmax(logits.data_ptr(), logits.shape[0], logits.shape[1], logits.stride(0), out.data_ptr())
    return out.tolist()
