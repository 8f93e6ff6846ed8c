"""The runner's inference-time projections: fused and oneDNN products against
torch's F.linear, and what stays shared (the panels kernel: test_panels.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mixboard_runner.models import panels
from mixboard_runner.models.linear import OneDnnLinear, column_major, fuse, pack_linears

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


def test_fuse_is_the_concatenation_of_the_parts():
    torch.manual_seed(0)
    parts = [nn.Linear(24, n, bias=True) for n in (16, 8, 8)]
    x = torch.randn(5, 24)
    torch.testing.assert_close(fuse(*parts)(x), torch.cat([p(x) for p in parts], -1), atol=1e-6, rtol=0)


@needs_onednn
@pytest.mark.parametrize("pack", [True, False])
@pytest.mark.parametrize("rows", [1, 7, 300])
def test_onednn_linear_matches_f_linear(pack, rows):
    torch.manual_seed(rows)
    linear = nn.Linear(96, 200, bias=True)
    x = torch.randn(rows, 96)
    expected = F.linear(x, linear.weight, linear.bias)
    torch.testing.assert_close(OneDnnLinear(linear, pack=pack)(x), expected, atol=1e-5, rtol=1e-5)


@needs_onednn
def test_a_weight_another_module_shares_is_not_copied():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(50, 16)
            self.proj = nn.Linear(16, 16)
            self.head = nn.Linear(16, 50, bias=False)
            self.head.weight = self.embed.weight

    model = Tied()
    pack_linears(model)
    assert isinstance(model.head, OneDnnLinear) and not model.head.packed
    assert model.head.weight.data_ptr() == model.embed.weight.data_ptr()  # the table itself, no copy
    if panels.UNAVAILABLE is None:
        assert isinstance(model.proj, panels.PanelLinear)
    else:
        assert isinstance(model.proj, OneDnnLinear) and model.proj.packed


@needs_onednn
def test_a_column_major_table_looks_up_and_projects_as_the_row_major_one():
    torch.manual_seed(0)
    table = torch.randn(300, 64)
    stored = column_major(table)
    assert torch.equal(stored, table) and stored.stride() == (1, 300)
    ids = torch.tensor([0, 299, 7, 7])
    assert torch.equal(F.embedding(ids, stored), F.embedding(ids, table))
    head = OneDnnLinear(nn.Linear(64, 300, bias=False), pack=False)
    head.weight = stored
    for rows in (1, 16):
        x = torch.randn(rows, 64)
        torch.testing.assert_close(head(x), F.linear(x, table), atol=1e-5, rtol=1e-5)
