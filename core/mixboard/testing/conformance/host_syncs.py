"""What in a forward keeps it out of a graph: reading a tensor's values on
the host, sizes that depend on the data, copies between devices.

``watch()`` records them while a forward runs, from torch's dispatcher
(a ``TorchDispatchMode``), where every ATen op a forward calls passes:

* ``aten._local_scalar_dense``, what ``.item()``, ``int(t)``, ``float(t)``,
  ``bool(t)`` and ``range(t)`` become: the host waits for the device, and
  a graph would keep the value it read when it was recorded;
* ops tagged ``dynamic_output_shape`` or ``data_dependent_output``
  (``nonzero``, ``masked_select``, ``unique``, ``repeat_interleave``
  without ``output_size``, indexing by a boolean mask, ``torch.equal``):
  the size of their output, or their answer, is known only from the data;
  and writing through a boolean mask (``t[mask] = v``), which takes the
  mask's ``nonzero`` on a GPU;
* copies between devices: any op whose tensors lie on more than one device
  (``aten._to_copy`` and ``aten.copy_`` from one to another, an index or a
  0-dim tensor on the host read by a device op).

``Tensor.tolist()`` and ``.numpy()`` of a host tensor read its values
without any ATen op, so they are caught one level up (a
``TorchFunctionMode``).

What this cannot see: a kernel called through ctypes or an extension that
takes ``data_ptr()`` (opaque to torch; a C kernel on the host cannot wait
for a device either), and, on a CPU run, copies between devices: a
``.cpu()`` or ``.to("cpu")`` of a host tensor is the tensor itself and
dispatches nothing, so a forward that copies its metadata to the host on a
GPU passes on CPU. Those are left to the replay check and to a GPU run.

Watch outside inference mode (the kit runs these cases under ``no_grad``):
inside it, torch hands the mode composite ops whole (``aten.where``, not
the ``aten.nonzero`` it runs), and only the few named here are known.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# .item() and friends; aten.item and aten.is_nonzero are how inference mode shows them
_SYNCS = ("aten::_local_scalar_dense", "aten::item", "aten::is_nonzero")
_MASKED_PUTS = ("aten::index_put", "aten::index_put_", "aten::_index_put_impl_")


def _op(func) -> str:
    return func._schema.name.replace("::", ".")  # without the overload: aten.index, not aten.index.Tensor


def _before(func, args, kwargs) -> str | None:
    """What is wrong with calling ``func`` so, seen before it runs."""
    name = func._schema.name
    if name in _SYNCS:
        return f"{_op(func)} (a host sync: .item(), int(t), float(t) or bool(t) of a tensor)"
    if name in _MASKED_PUTS and _masked(args[1] if len(args) > 1 else kwargs.get("indices", ())):
        return f"{_op(func)} through a boolean mask (t[mask] = ...: the mask's nonzero, a host sync on a GPU)"
    tags = func.tags
    if torch.Tag.data_dependent_output in tags:
        return f"{_op(func)} (its answer is read from the data on the host)"
    data_sized = torch.Tag.dynamic_output_shape in tags or name in ("aten::repeat_interleave", "aten::where")
    if data_sized and _data_sized(name, args, kwargs):
        return f"{_op(func)} (an output whose size depends on the data)"
    return None


def _data_sized(name: str, args, kwargs) -> bool:
    """Whether this call of an op tagged ``dynamic_output_shape`` sizes its output from the data:
    some calls are told the size, or index by integers."""
    if name == "aten::index":  # t[mask] is sized by the mask's count; t[ints] by the index
        return _masked(args[1] if len(args) > 1 else kwargs.get("indices", ()))
    if name == "aten::repeat_interleave":  # told its size, or repeating by an int (inference mode shows that call)
        repeats = args[1] if len(args) > 1 else args[0]
        return isinstance(repeats, torch.Tensor) and kwargs.get("output_size") is None
    if name == "aten::where":  # torch.where(condition) alone is nonzero (inference mode shows that call)
        return len(args) + len(kwargs) == 1
    if name == "aten::one_hot":
        classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
        return classes < 0
    return True


def _masked(indices) -> bool:
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _devices(args, kwargs, out) -> set:
    """The devices of the tensors an op call reads and makes."""
    found = set()
    for value in (*args, *kwargs.values(), out):
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor):
                found.add(t.device)
    return found


class _DispatchWatch(TorchDispatchMode):
    def __init__(self, found: list[str]):
        super().__init__()
        self.found = found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        problem = _before(func, args, kwargs)
        if problem:
            self.found.append(problem)
        out = func(*args, **kwargs)
        devices = _devices(args, kwargs, out)
        if len(devices) > 1:  # _to_copy, copy_, an index or a 0-dim tensor on another device
            where = " and ".join(sorted(map(str, devices)))
            self.found.append(f"{_op(func)} between {where} (a copy between devices)")
        return out


class _HostReadWatch(TorchFunctionMode):
    """``tolist`` and ``numpy``: a host tensor's values read without an ATen op."""

    def __init__(self, found: list[str]):
        super().__init__()
        self.found = found

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("tolist", "numpy"):
            self.found.append(f"Tensor.{name} (its values read on the host)")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def watch() -> Iterator[list[str]]:
    """Records, in the order called, what keeps the code run inside out of a graph (one line each)."""
    found: list[str] = []
    with _HostReadWatch(found), _DispatchWatch(found):
        yield found


def summary(found: list[str]) -> str:
    """The first thing found, and how many more."""
    more = len(found) - 1
    return found[0] + (f" (and {more} more such call{'s' if more > 1 else ''})" if more else "")
