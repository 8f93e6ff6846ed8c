"""Keep large freed blocks for reuse instead of handing them back to the OS.

glibc gives large blocks back to the OS when they are freed (``munmap`` of
blocks over its mmap threshold, trimming of the heap's top past its trim
threshold; both thresholds start small and adjust themselves). A step's
large temporaries are then page-faulted in afresh on every step (what that
costs: benchmarks/README.md). Fixed, higher thresholds let freed blocks stay
in the heap and be reused. It changes the whole process's allocator, so the
Engine does it only when asked (``Engine(reuse_host_memory=True)``, as
``mixboard run`` does) and only on glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's mallopt parameters
MMAP_THRESHOLD = 32 << 20  # glibc's largest: blocks up to this come from the heap
TRIM_THRESHOLD = 256 << 20  # free heap kept before returning any to the OS
TOP_PAD = 64 << 20  # heap growth per request, so that growing rarely faults page by page

_done = False


def reuse_freed_memory() -> bool:
    """Apply the settings once per process; False where the C library is not glibc."""
    global _done
    if _done:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = all(libc.mallopt(p, v) == 1 for p, v in ((M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                                                       (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD)))
    except (OSError, AttributeError):
        return False
    _done = ok
    return ok
