"""The environment selection runs against: device type, GPU runtime and
architecture, NVIDIA compute capability, CPU features and torch version.
Detected from the machine, or simulated to ask "what would run on an H100,
an MI300X, a Sapphire Rapids CPU?" from a laptop (``--arch sm_90``,
``--arch gfx942``, ``--device cpu --cpu-features amx``).

The record itself is environment_facts.py's (re-exported here): getting one
reads the devices plugins describe, which the record's readers sit below."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import metadata

from . import cpu_features as _features
from .environment_facts import Environment
from .errors import UsageError
from .plugins import loaded

# torch's device types, in-tree and common out-of-tree (privateuse1) names;
# plugins add the out-of-tree devices they describe (known_devices()).
KNOWN_DEVICES = ("cpu", "cuda", "mps", "xpu", "hpu", "mtia", "npu", "xla", "meta")

_SM = re.compile(r"sm_([1-9]|1\d)(\d)([af]?)")  # sm_80, sm_90a, sm_100, sm_120f
_GFX = re.compile(r"gfx\d{1,2}[0-9a-f]{2}")  # gfx90a, gfx942, gfx1100
ARCH_HELP = ("write sm_XY for NVIDIA (sm_80, sm_90, sm_90a, sm_100) or gfxNNN for AMD (gfx90a, gfx942, gfx1100); "
             "a plugin's device takes its own names, with --device")

__all__ = ["Environment", "detect", "simulate", "for_device", "resolve", "known_devices", "parse_capability",
           "parse_gpu_arch", "KNOWN_DEVICES", "ARCH_HELP"]


def parse_capability(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", text)
    if not match:
        raise UsageError(f"bad capability {text!r}: write MAJOR.MINOR, for example 8.0 or 9.0")
    return int(match.group(1)), int(match.group(2))


def parse_gpu_arch(text: str) -> tuple[str, str, tuple[int, int] | None]:
    """``"sm_90"`` -> ("cuda", "sm_90", (9, 0)); ``"gfx942"`` (or the target id
    ``"gfx90a:sramecc+:xnack-"``) -> ("rocm", "gfx942", None)."""
    name = text.strip().lower().split(":")[0]
    match = _SM.fullmatch(name)
    if match:
        return "cuda", name, (int(match.group(1)), int(match.group(2)))
    if _GFX.fullmatch(name):
        return "rocm", name, None
    raise UsageError(f"bad --arch {text!r}: {ARCH_HELP}")


def _installed_torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return ""


def _plugin_devices() -> dict:
    return loaded().devices  # the same scan get_registry() makes, once per process


def known_devices() -> tuple[str, ...]:
    """Device types ``simulate`` accepts: torch's common ones and those plugins describe."""
    return KNOWN_DEVICES + tuple(sorted(set(_plugin_devices()) - set(KNOWN_DEVICES)))


def _description(device: str):
    """The plugin's Device for an out-of-tree device, None for torch's own; unknown names are UsageErrors."""
    from .devices import NATIVE_DEVICE_TYPES

    if device not in NATIVE_DEVICE_TYPES:
        described = _plugin_devices().get(device)
        if described is not None:
            return described
    if device in KNOWN_DEVICES:
        return None
    hint = ""
    if device in ("rocm", "hip", "amd", "nvidia", "gpu"):
        hint = " (NVIDIA and AMD GPUs are torch device cuda: --arch sm_90 or --arch gfx942 says which)"
    raise UsageError(f"unknown device {device!r}; expected one of {', '.join(known_devices())}{hint}")


def simulate(device: str, capability: str | tuple[int, int] | None = None, *, arch: str | None = None,
             cpu_features=None) -> Environment:
    """An environment as described, without touching hardware.

    ``arch``: ``"sm_90"`` (NVIDIA, implies capability 9.0), ``"gfx942"``
    (AMD ROCm), or a name a plugin's device accepts. ``cpu_features``:
    ``"avx2,avx512"``, a set of names, or ``"none"``; None assumes this
    machine's (``cpu_features.detect()``).
    """
    features = _features.detect() if cpu_features is None else _features.parse(cpu_features)
    if isinstance(capability, str):
        capability = parse_capability(capability)
    elif capability is not None:
        capability = tuple(capability)
    version = _installed_torch_version()
    if device == "cuda":
        return _simulated_gpu(capability, arch, features, version)
    described = _description(device)
    if capability is not None:
        raise UsageError(f"--capability applies to device cuda, not {device!r}")
    if arch is not None:
        if described is None:
            raise UsageError(f"--arch applies to device cuda (sm_90, gfx942) or a plugin's device, not {device!r}")
        if described.archs and arch not in described.archs:
            raise UsageError(f"unknown arch {arch!r} for device {device!r}; its archs: {', '.join(described.archs)}")
    return Environment(device, None, version, described.runtime if described else None, arch, features)


def _simulated_gpu(capability, arch, features, version) -> Environment:
    if arch is None:
        return Environment("cuda", capability, version, cpu_features=features)
    runtime, name, implied = parse_gpu_arch(arch)
    if capability is not None and runtime == "rocm":
        raise UsageError(f"--capability {capability[0]}.{capability[1]} is an NVIDIA compute capability; {name} is an "
                         f"AMD GPU, which has none: drop --capability")
    if capability is not None and capability != implied:
        raise UsageError(f"--capability {capability[0]}.{capability[1]} contradicts --arch {name} (capability "
                         f"{implied[0]}.{implied[1]}): give one of them")
    return Environment("cuda", implied, version, runtime, name, features)


def _gpu(torch, index: int | None, features: frozenset[str]) -> Environment:
    """A visible CUDA-or-ROCm GPU: ROCm reports a capability too (9.4 on an
    MI300), which is not NVIDIA's, so ROCm keeps only its gfx name."""
    if index is None:
        index = torch.cuda.current_device()
    if getattr(torch.version, "hip", None):
        name = getattr(torch.cuda.get_device_properties(index), "gcnArchName", "") or ""
        return Environment("cuda", None, torch.__version__, "rocm", name.split(":")[0] or None, features)
    return Environment("cuda", tuple(torch.cuda.get_device_capability(index)), torch.__version__, "cuda", None, features)


def _out_of_tree(torch, features: frozenset[str]) -> Environment | None:
    """privateuse1 renamed to a device a plugin describes, and available."""
    name_of = getattr(torch._C, "_get_privateuse1_backend_name", None)
    name = name_of() if name_of else "privateuseone"
    if name == "privateuseone":
        return None
    described = _plugin_devices().get(name)
    if described is None:
        return None
    is_available = getattr(getattr(torch, name, None), "is_available", None)
    if is_available is not None and not is_available():
        return None
    arch = None
    if described.arch is not None:
        try:
            arch = described.arch()
        except Exception:  # a vendor's probe failing must not stop selection; arch stays unknown
            arch = None
    return Environment(name, None, torch.__version__, described.runtime, arch, features)


@lru_cache(maxsize=1)
def detect() -> Environment:
    """This machine: a CUDA or ROCm GPU if torch sees one, else an out-of-tree
    device a plugin describes, else torch's current accelerator, else cpu.
    CPU features are read once from /proc/cpuinfo (torch's probe elsewhere)."""
    import torch

    features = _features.detect()
    if torch.cuda.is_available():
        return _gpu(torch, None, features)
    found = _out_of_tree(torch, features)
    if found is not None:
        return found
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return Environment(accelerator.current_accelerator().type, None, torch.__version__, cpu_features=features)
    return Environment("cpu", None, torch.__version__, cpu_features=features)


def for_device(device: str) -> Environment:
    """The real environment of a torch device the caller will run on
    ("cpu", "cuda", "cuda:1", ...); a device torch cannot use is a UsageError."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        return _no_such_device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"device {device!r} is not available here: torch sees no CUDA or ROCm device")
        return _gpu(torch, dev.index, _features.detect())
    if dev.type == "cpu":
        return Environment("cpu", None, torch.__version__, cpu_features=_features.detect())
    here = detect()
    if here.device != dev.type:
        raise UsageError(f"device {device!r} is not available here (this machine: {here.device})")
    return here


def _no_such_device(device) -> Environment:
    """A device torch rejects: one a plugin describes whose extension is not loaded, or a typo."""
    known = known_devices()
    if str(device).partition(":")[0] in known:
        raise UsageError(f"device {device!r} is not available here: torch has no such device in this process "
                         f"(is its torch extension installed?)")
    raise UsageError(f"unknown device {device!r}; expected one of {', '.join(known)}, optionally with an index "
                     f"(cuda:1)")


def resolve(device: str | None = None, capability: str | None = None, arch: str | None = None,
            cpu_features: str | None = None) -> Environment:
    """Detected when nothing is given; simulated otherwise (the CLI's flags).
    A capability or arch alone means device cuda; CPU features alone, cpu."""
    if device is None and capability is None and arch is None and cpu_features is None:
        return detect()
    if device is None:
        device = "cuda" if capability is not None or arch is not None else "cpu"
    return simulate(device, capability, arch=arch, cpu_features=cpu_features)
