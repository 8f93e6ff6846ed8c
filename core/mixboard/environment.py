"""The environment selection runs against: device type, compute capability
and torch version. Detected from the machine, or simulated to ask "what would
run on an H100?" from a laptop (``--device cuda --capability 9.0``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

from .errors import UsageError

# torch's device types, in-tree and common out-of-tree (privateuse1) names.
KNOWN_DEVICES = ("cpu", "cuda", "mps", "xpu", "hpu", "mtia", "npu", "xla", "meta")


@dataclass(frozen=True)
class Environment:
    device: str = "cpu"
    capability: tuple[int, int] | None = None  # CUDA/ROCm compute capability, e.g. (9, 0)
    torch_version: str = ""

    @property
    def capability_text(self) -> str | None:
        return None if self.capability is None else f"{self.capability[0]}.{self.capability[1]}"

    def to_dict(self) -> dict:
        return {"device": self.device, "capability": self.capability_text, "torch_version": self.torch_version}

    def __str__(self) -> str:
        cap = f" (capability {self.capability_text})" if self.capability else ""
        return f"{self.device}{cap}, torch {self.torch_version or 'unknown'}"


def parse_capability(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", text)
    if not match:
        raise UsageError(f"bad capability {text!r}: write MAJOR.MINOR, for example 8.0 or 9.0")
    return int(match.group(1)), int(match.group(2))


def _installed_torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return ""


def simulate(device: str, capability: str | tuple[int, int] | None = None) -> Environment:
    """An environment as described, without touching hardware."""
    if device not in KNOWN_DEVICES:
        raise UsageError(f"unknown device {device!r}; expected one of {', '.join(KNOWN_DEVICES)}")
    if isinstance(capability, str):
        capability = parse_capability(capability)
    if capability is not None and device != "cuda":
        raise UsageError(f"--capability applies to device cuda, not {device!r}")
    return Environment(device, capability, _installed_torch_version())


@lru_cache(maxsize=1)
def detect() -> Environment:
    """This machine: CUDA (with its capability) if torch sees it, else torch's
    current accelerator if any, else cpu."""
    import torch

    if torch.cuda.is_available():
        return Environment("cuda", tuple(torch.cuda.get_device_capability()), torch.__version__)
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return Environment(accelerator.current_accelerator().type, None, torch.__version__)
    return Environment("cpu", None, torch.__version__)


def for_device(device: str) -> Environment:
    """The real environment of a torch device the caller will run on
    ("cpu", "cuda", "cuda:1", ...); a device torch cannot use is a UsageError."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UsageError(f"unknown device {device!r}: {exc}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"device {device!r} is not available here: torch sees no CUDA device")
        return Environment("cuda", tuple(torch.cuda.get_device_capability(dev)), torch.__version__)
    if dev.type != "cpu" and detect().device != dev.type:
        raise UsageError(f"device {device!r} is not available here (this machine: {detect().device})")
    return Environment(dev.type, None, torch.__version__)


def resolve(device: str | None = None, capability: str | None = None) -> Environment:
    """Detected when nothing is given; simulated otherwise (the CLI's flags)."""
    if device is None and capability is None:
        return detect()
    if device is None:
        device = "cuda"  # a capability alone only makes sense for CUDA
    return simulate(device, capability)
