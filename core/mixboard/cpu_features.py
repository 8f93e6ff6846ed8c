"""CPU features a backend's ``check()`` may ask for, by one small vocabulary.

Each name stands for what a kernel compiled for it needs, not for one cpuid
bit (``avx512`` is the AVX-512 subset torch's and our kernels use):

    name         the CPU has                                   /proc/cpuinfo flags
    avx2         AVX2 and FMA3 (x86-64-v3: Haswell, Zen)       avx2 fma
    avx512       AVX-512 F, BW, DQ, VL (x86-64-v4)             avx512f avx512bw avx512dq avx512vl
    avx512_vnni  AVX-512 VNNI, int8 dot products               avx512_vnni
    avx512_bf16  AVX-512 BF16 (Cooper Lake, SPR, Zen 4)        avx512_bf16
    amx          AMX tiles with bf16 (Sapphire Rapids, later)  amx_tile amx_bf16
    neon         Arm Advanced SIMD (every AArch64 CPU)         asimd (neon on 32-bit Arm)
    sve          Arm SVE (Graviton3, Grace, A64FX)             sve

A simulated feature brings what every CPU with it has (``IMPLIES``):
avx512 -> avx2; avx512_vnni, avx512_bf16, amx -> avx512; sve -> neon.

Detected from ``/proc/cpuinfo`` on Linux (the kernel lists only what it
enabled), elsewhere from torch's own probe (``torch.backends.cpu.
get_cpu_capability()``: AVX2, AVX512, SVE) and the machine's architecture,
which is best effort: it cannot see VNNI, BF16 or AMX.
"""

from __future__ import annotations

from functools import lru_cache

from .errors import UsageError

# name -> the cpuinfo flags that must all be present (any one tuple of the list)
FLAGS: dict[str, tuple[tuple[str, ...], ...]] = {
    "avx2": (("avx2", "fma"),),
    "avx512": (("avx512f", "avx512bw", "avx512dq", "avx512vl"),),
    "avx512_vnni": (("avx512_vnni",),),
    "avx512_bf16": (("avx512_bf16",),),
    "amx": (("amx_tile", "amx_bf16"),),
    "neon": (("asimd",), ("neon",)),
    "sve": (("sve",),),
}
CPU_FEATURES = tuple(FLAGS)
X86 = frozenset({"avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx"})
ARM = frozenset({"neon", "sve"})

# What a feature brings with it on every CPU that has it, so that a simulated
# "--cpu-features amx" also satisfies a check for avx512 or avx2.
IMPLIES = {"avx512": "avx2", "avx512_vnni": "avx512", "avx512_bf16": "avx512", "amx": "avx512", "sve": "neon"}


def from_flags(flags: set[str] | frozenset[str]) -> frozenset[str]:
    """The vocabulary's names that a set of /proc/cpuinfo flags provides."""
    return frozenset(name for name, options in FLAGS.items() if any(flags.issuperset(o) for o in options))


def _cpuinfo_flags(path: str = "/proc/cpuinfo") -> set[str] | None:
    """The first processor's flags (x86 "flags", Arm "Features"), or None where unreadable."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:  # stop at the first processor's line: big machines list hundreds
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        return None
    return None


def _from_torch() -> frozenset[str]:
    import platform

    import torch

    level = torch.backends.cpu.get_cpu_capability().upper()  # DEFAULT, AVX2, AVX512, SVE256, ...
    found = {name for prefix, name in (("AVX512", "avx512"), ("AVX2", "avx2"), ("SVE", "sve")) if level.startswith(prefix)}
    if platform.machine().lower() in ("arm64", "aarch64"):
        found.add("neon")
    return closure(found)


@lru_cache(maxsize=1)
def detect() -> frozenset[str]:
    """This machine's CPU features (read once per process)."""
    flags = _cpuinfo_flags()
    return from_flags(flags) if flags is not None else _from_torch()


def closure(names) -> frozenset[str]:
    found = set(names)
    for name in list(found):
        while name in IMPLIES:
            name = IMPLIES[name]
            found.add(name)
    return frozenset(found)


def parse(text) -> frozenset[str]:
    """``"avx2,avx512"`` (or an iterable of names) -> the features with what
    they imply; ``"none"`` or ``""`` is no feature. Unknown names and a mix
    of x86 and Arm features are UsageErrors."""
    if isinstance(text, str):
        names = [] if text.strip().lower() == "none" else [n.strip().lower() for n in text.split(",") if n.strip()]
    else:
        names = list(text)
    unknown = [n for n in names if n not in FLAGS]
    if unknown:
        raise UsageError(f"unknown CPU feature {unknown[0]!r}; known: {', '.join(CPU_FEATURES)} (or none)")
    found = closure(names)
    if found & X86 and found & ARM:
        raise UsageError(f"CPU features {', '.join(sorted(found & X86))} (x86) and {', '.join(sorted(found & ARM))} "
                         "(Arm) cannot be on one CPU")
    return found


def ordered(features) -> list[str]:
    """Features in the vocabulary's order (for display and JSON)."""
    return [n for n in CPU_FEATURES if n in features]
