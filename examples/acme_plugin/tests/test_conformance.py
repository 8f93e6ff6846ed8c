"""acme_attn against mixboard's conformance kit: every case of the attention
suite (ragged batches, decodes after prefills, chunked prefills, state
isolation, strided inputs, GQA/MQA, head sizes, sliding window, soft cap,
non-causal), compared with mixboard's reference implementation."""

from mixboard.testing.conformance import AttentionConformance


class TestAcmeAttention(AttentionConformance):
    backend = "acme_attn"
    device = "cpu"
    dtypes = ("float32", "bfloat16")  # without this line: every dtype the backend declares
