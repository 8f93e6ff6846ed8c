"""Large host tensors on 2 MB pages (Linux transparent huge pages), in pure Python.

Pools and weights streamed every step (the runner's cache pools,
mixboard-cpu's panels) then cross a page, and its TLB miss, every 2 MB
instead of every 4 KB. Ask before the memory is first written: pages
already touched stay small."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import torch

HUGE = 2 << 20
MADV_HUGEPAGE = 14  # Linux's value (asm-generic/mman-common.h)
FROM_BYTES = 4 << 20  # smaller tensors hold at most one whole 2 MB page


def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int
    return fn


_MADVISE = _madvise()


def huge_pages(t: torch.Tensor) -> torch.Tensor:
    """``t``, the whole 2 MB pages inside its memory backed by huge pages where
    the OS allows (a no-op for small or non-CPU tensors, and elsewhere)."""
    size = t.numel() * t.element_size()
    if _MADVISE is None or t.device.type != "cpu" or size < FROM_BYTES:
        return t
    start = t.data_ptr()
    first, end = (start + HUGE - 1) & ~(HUGE - 1), (start + size) & ~(HUGE - 1)
    if end > first:
        _MADVISE(first, end - first, MADV_HUGEPAGE)
    return t
