"""``acme_attn``: what mixboard reads to list, explain and select the backend.

Nothing heavy is imported here (not even torch): the kernels load in
``make_impl``, when a model is built.
"""

from __future__ import annotations

from mixboard import Backend, Declaration


class AcmeAttention(Backend):
    # Every fact mixboard reads about the backend, stated once; the class holds only code.
    declaration = Declaration(
        name="acme_attn",
        kind="attention",
        priority=5,  # below the first-party sdpa (10): chosen when forced with --backend attention=acme_attn
        devices=("*",),  # plain torch: any device torch runs on
        dtypes=("float32", "bfloat16", "float16"),
        api_version=1,
        capture="never",  # our plan holds each sequence's rows and blocks as Python ints (plan.py)
        description="ACME online-softmax attention: walks each sequence's cache blocks once, skipping invisible ones",
        # Bounds on |ours - mixboard's oracle| that `mixboard check` and the
        # conformance kit hold this backend to; we accumulate in float32 and round once.
        tolerances={"float32": 1e-5, "bfloat16": 3e-2, "float16": 4e-3},
    )

    @classmethod
    def builder(cls, spec, env):
        from .plan import build_plan

        return build_plan

    @classmethod
    def make_impl(cls, spec, env):
        from .online_softmax import OnlineSoftmaxAttention

        return OnlineSoftmaxAttention(spec)
