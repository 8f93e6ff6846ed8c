"""Test double of mamba-ssm 2.3: the three Triton entry points mixboard-mamba2
calls, written in plain PyTorch from their documented semantics (loops over
tokens, float32), so the backend's argument plumbing can be tested on CPU.

Unlike the real package, importing it loads no CUDA extension. Every call is
appended to ``CALLS`` as (function name, facts about the arguments).
"""

__version__ = "2.3.0"

CALLS: list = []
