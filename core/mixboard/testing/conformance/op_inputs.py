"""A dense op's arguments on the backend's device, and what it may do to them.

In the strided layout every [T, ...] argument is a view into a wider
buffer (rows padded, an offset), as a fused product's slices are;
the arguments a call fuses are views of one buffer, side by side, with
more of it after them (rotary's q and k, then the v that must stay as it
was). One-dimensional arguments (ids, positions) stay contiguous: their
only dimension is the channel one, which the contract keeps at stride 1.

The padding holds the kit's poison: finite, so that a kernel that loads a
whole vector past a row's end and masks the extra lanes with zeros stays
right (PyTorch's own bfloat16 CPU product does: NaN there would give NaN),
and far from the inputs, so that one that reads it as data is wrong by far
more than any tolerance.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from .cases import STRIDED
from .isolation import POISON
from .ops import OpCall
from .readonly import same_tensor

_LEFT, _RIGHT = 3, 5  # padding of each strided row: an offset, and what follows (v, for q and k)


def place_op(host: Mapping[str, torch.Tensor | None], call: OpCall, device: Any, layout: str) -> dict:
    """Copies of ``host`` on ``device``, laid out as ``layout`` says (None stays None)."""
    out = {name: (None if t is None else t.to(device, copy=True)) for name, t in host.items()}
    if layout != STRIDED:
        return out
    strided = [n for n, t in host.items() if t is not None and t.dim() >= 2]
    groups = [[n for n in strided if n in call.fused]] + [[n] for n in strided if n not in call.fused]
    for names in filter(None, groups):
        first = host[names[0]]
        widths = [host[n][0].numel() for n in names]
        buffer = torch.full((first.shape[0], _LEFT + sum(widths) + _RIGHT), POISON, dtype=first.dtype,
                            device=device)
        start = _LEFT
        for name, width in zip(names, widths):
            view = buffer[:, start:start + width].view(host[name].shape)
            view.copy_(host[name])
            out[name] = view
            start += width
    return out


class Kept:
    """What the caller gave, copied before the call, to tell afterwards what the op wrote."""

    def __init__(self, given: Mapping[str, torch.Tensor | None]):
        self.values = {n: t.clone() for n, t in given.items() if t is not None}
        self.buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for t in given.values():
            if t is not None and t._base is not None:
                self.buffers.setdefault(id(t._base), (t._base, t._base.clone()))

    def changed(self, given: Mapping[str, torch.Tensor | None], call: OpCall) -> str | None:
        for name, before in self.values.items():
            if name not in call.handed and not same_tensor(given[name], before):
                return f"the backend changed its input {name!r} in place (the kind hands over only " \
                       f"{_names(call.handed)})"
        for base, before in self.buffers.values():
            handed = [t for name, t in given.items() if t is not None and t._base is base and name in call.handed]
            outside = torch.ones(base.shape, dtype=torch.bool, device=base.device) if handed else None
            for t in handed:  # its own to write
                outside.as_strided(t.shape, t.stride(), t.storage_offset() - base.storage_offset()).fill_(False)
            if not (same_tensor(base[outside], before[outside]) if handed else same_tensor(base, before)):
                return ("the backend wrote outside its inputs, into the rest of the buffer they are views of (a "
                        "fused product's other slices live there)")
        return None


def shared_with(out: torch.Tensor, tensors: Mapping[str, Any]) -> str | None:
    """The name of the first tensor whose memory ``out`` shares, or None."""
    if out.numel() == 0:
        return None
    mine = out.untyped_storage().data_ptr()
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.numel() and t.untyped_storage().data_ptr() == mine:
            return name
    return None


def _names(names) -> str:
    return ", ".join(repr(n) for n in names) or "none"
