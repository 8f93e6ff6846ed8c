"""Devices a plugin describes: torch device types that live out of tree.

torch has one slot for an out-of-tree device, ``privateuse1``, which a
vendor's extension renames (``torch.utils.rename_privateuse1_backend("acme")``)
so that tensors live on ``"acme"``. mixboard knows such a device only when a
plugin describes it (hook ``mixboard_devices``); then ``--device acme``
simulates it from any machine, ``detect()`` recognizes it where torch has it,
and backends declaring ``devices = ("acme",)`` are selected there.
"""

from __future__ import annotations

import re
from typing import Any, Callable

# torch's own device types (c10::DeviceType): a plugin cannot redefine these.
NATIVE_DEVICE_TYPES = frozenset({
    "cpu", "cuda", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia", "xla", "vulkan", "metal",
    "xpu", "mps", "meta", "hpu", "lazy", "ipu", "mtia", "privateuseone",
})
_NAME = re.compile(r"[a-z][a-z0-9_]*")


class Device:
    """An out-of-tree torch device, as a plugin describes it::

        Device("acme", "Acme NPU through torch_acme (privateuse1)",
               archs=("acme2", "acme3"), arch=lambda: torch_acme.arch_name(0))

    ``name``: the torch device type (what privateuse1 is renamed to).
    ``description``: one line, shown by ``mixboard backends``.
    ``archs``: the architecture names ``--arch`` accepts for it (empty: any).
    ``arch``: a function returning this machine's architecture name (or None),
    called by ``detect()`` only when torch has the device, so it may import
    the vendor's module. ``runtime``: the software stack, if worth naming
    (``Environment.runtime``).

    ``to_dict()`` is what ``mixboard plugins --json`` lists under the
    plugin's ``devices`` (name, description, archs, runtime).

    ``detect()`` takes the device as this machine's when torch's privateuse1
    is renamed to ``name`` and, where the extension registered a module
    (``torch._register_device_module``), its ``is_available()`` says so.
    """

    __slots__ = ("name", "description", "archs", "arch", "runtime")

    def __init__(self, name: str, description: str, *, archs: tuple[str, ...] = (),
                 arch: Callable[[], str | None] | None = None, runtime: str | None = None):
        self.name, self.description, self.archs, self.arch, self.runtime = name, description, archs, arch, runtime

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "archs": list(self.archs), "runtime": self.runtime}

    def __repr__(self) -> str:
        return f"Device({self.name!r})"


def device_problem(item: Any) -> str | None:
    """Why a ``mixboard_devices()`` item cannot be registered, or None."""
    if not isinstance(item, Device):
        return f"mixboard_devices() returned {item!r}, which is not a mixboard.Device"
    if not isinstance(item.name, str) or not _NAME.fullmatch(item.name):
        return f"device name {item.name!r} must be a lowercase identifier (torch's device type)"
    if item.name in NATIVE_DEVICE_TYPES:
        return (f"describes device {item.name!r}, which torch has natively; a plugin describes only out-of-tree "
                f"(privateuse1) devices")
    if not isinstance(item.description, str) or not item.description.strip():
        return f"device {item.name!r}: description must be a non-empty line"
    if isinstance(item.archs, str) or not all(isinstance(a, str) and a for a in item.archs):
        return f"device {item.name!r}: archs must be a tuple of names, not {item.archs!r}"
    if item.arch is not None and not callable(item.arch):
        return f"device {item.name!r}: arch must be a function returning this machine's architecture name"
    if item.runtime is not None and not isinstance(item.runtime, str):
        return f"device {item.name!r}: runtime must be a name or None"
    return None
