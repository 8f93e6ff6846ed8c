"""``embedding_cpu`` (a tied table once, as panels) and ``embedding_onednn``
(once, column-major) against the kind's oracle: lookups, the LM head's
product at 1, 16 and 37 rows, vocabularies off the 16 lanes; ids outside the
table refused."""

from __future__ import annotations

import pytest
import torch

from mixboard import EmbeddingSpec, EmbeddingWeights
from mixboard_cpu.compiled import PANELS, kernel_unusable
from mixboard_cpu.embedding_backend import EmbeddingCpu
from mixboard_cpu.embedding_onednn_backend import EmbeddingOneDnn
from cpu_ops import loaded, oracle

pytestmark = pytest.mark.skipif(bool(kernel_unusable(PANELS)), reason=f"{PANELS} is not built")


@pytest.mark.parametrize("backend", [EmbeddingCpu, EmbeddingOneDnn])
@pytest.mark.parametrize("vocab, dim", [(37, 24), (48, 24), (1000, 64)])
def test_lookups_and_the_lm_head_match_the_oracle(backend, vocab, dim):
    spec = EmbeddingSpec(num_embeddings=vocab, embedding_dim=dim, tied=True)
    w = EmbeddingWeights(weight=torch.randn(vocab, dim, generator=torch.Generator().manual_seed(vocab)))
    impl, ref = loaded(backend, spec, w), oracle(spec, w)
    ids = torch.tensor([0, vocab - 1, 7, 7, 16, vocab // 2])
    assert torch.equal(impl.forward(ids), ref.forward(ids))  # a lookup is a copy: exact
    for rows in (1, 16, 37):
        hidden = torch.randn(rows, dim)
        torch.testing.assert_close(impl.logits(hidden), ref.logits(hidden), atol=2e-5, rtol=1e-5)
    wide = torch.randn(5, 3 * dim)[:, dim:2 * dim]  # rows of a wider tensor
    torch.testing.assert_close(impl.logits(wide), ref.logits(wide), atol=2e-5, rtol=1e-5)


def test_the_table_is_stored_once_as_panels():
    spec = EmbeddingSpec(num_embeddings=40, embedding_dim=8, tied=True)
    impl = loaded(EmbeddingCpu, spec, EmbeddingWeights(weight=torch.randn(40, 8)))
    assert [k for k, v in vars(impl).items() if isinstance(v, torch.Tensor)] == ["panels"]
    assert impl.panels.shape == (3, 8, 16) and not impl.panels[-1, :, 8:].any()  # the padding zero


@pytest.mark.parametrize("bad", [40, 41, -1])
def test_an_id_outside_the_table_is_refused_not_read_from_the_padding(bad):
    spec = EmbeddingSpec(num_embeddings=40, embedding_dim=8, tied=True)
    impl = loaded(EmbeddingCpu, spec, EmbeddingWeights(weight=torch.randn(40, 8)))
    with pytest.raises(IndexError, match=f"token id {bad} is outside the table's 40 rows"):
        impl.forward(torch.tensor([3, bad]))
