"""mixboard-cpu's panel layout: ``W[16 p + j, k]`` at ``[p, k, j]``, the
last panel's padding zero, a gated weight's gate and up panels interleaved,
and a large weight's panels on 2 MB pages (core's ``mixboard.ops.huge_pages``)."""

from __future__ import annotations

import sys

import pytest
import torch

from mixboard_cpu.compiled import PANELS, kernel_unusable

pytestmark = pytest.mark.skipif(bool(kernel_unusable(PANELS)), reason=f"{PANELS} is not built")


def from_panels(panels: torch.Tensor, rows: int) -> torch.Tensor:
    """The [rows, in] matrix back."""
    return panels.transpose(1, 2).reshape(-1, panels.shape[1])[:rows]


@pytest.mark.parametrize("out, inp", [(64, 48), (37, 97), (1, 5)])
def test_to_panels_lays_row_16p_plus_j_at_p_k_j(out, inp):
    from mixboard_cpu.panels import to_panels

    w = torch.randn(out, inp, dtype=torch.bfloat16)
    panels = to_panels(w)
    assert panels.shape == (-(-out // 16), inp, 16) and panels.dtype == torch.float32 and panels.is_contiguous()
    p, j = divmod(out - 1, 16)
    assert torch.equal(panels[p, :, j], w[out - 1].float())
    assert torch.equal(from_panels(panels, out), w.float())
    assert not panels[-1, :, j + 1:].any()  # the padding zero


def test_gated_panels_interleave_gate_and_up():
    from mixboard_cpu.panels import gated_panels

    out, inp = 37, 20
    w = torch.randn(2 * out, inp)
    both = gated_panels(w, out)
    assert both.shape == (2 * 3, inp, 16)
    assert torch.equal(from_panels(both[0::2], out), w[:out]) and torch.equal(from_panels(both[1::2], out), w[out:])
    assert not both[-2:, :, out % 16:].any()  # both last panels' padding zero


def _vm_flags(address: int) -> list[str]:
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("VmFlags:"):
                return line.split()[1:]
    return []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages are Linux's")
def test_a_large_weights_panels_ask_for_huge_pages_and_a_small_ones_do_not():
    from mixboard_cpu.panels import to_panels

    huge = 2 << 20
    large, small = to_panels(torch.randn(1024, 2048)), to_panels(torch.randn(16, 64))  # 8 MB, 4 KB
    inside = (large.data_ptr() + huge - 1) & ~(huge - 1)  # the first whole 2 MB page of the large one
    assert "hg" in _vm_flags(inside)
    assert "hg" not in _vm_flags(small.data_ptr())
