"""mixboard inside vLLM: vLLM's attention, mamba1, mamba2, short_conv and Gated DeltaNet layers,
and the experts vLLM's own build cannot run (moe), run on the backends mixboard's registry plans
for them.

``register()`` is the ``vllm.general_plugins`` entry point; vLLM calls it once in each of its
processes (LLM/API, engine core, workers) before it builds a model. It registers class paths
and the op the taken-over layers call (ops.py), and hooks the building of mixer layers; the plan
is made in each worker once the model exists (plan.py).

Off switch: ``MIXBOARD_VLLM=0``. Outside the supported vLLM range (version.py) it says so in
one line and leaves vLLM untouched, or raises under ``MIXBOARD_STRICT_PLUGINS=1``.
"""

from __future__ import annotations

import os

from .version import SUPPORTED, supported

__version__ = "0.1.0"
_registered = False


def _logger():
    from vllm.logger import init_logger

    return init_logger("vllm.mixboard")


def strict() -> bool:
    return os.environ.get("MIXBOARD_STRICT_PLUGINS", "") not in ("", "0")


def register() -> None:
    global _registered
    if _registered:
        return
    _registered = True
    if os.environ.get("MIXBOARD_VLLM", "1") == "0":
        _logger().info("mixboard-vllm is off (MIXBOARD_VLLM=0): vLLM runs its own layers")
        return
    import vllm

    if not supported(vllm.__version__):
        msg = (f"mixboard-vllm {__version__} supports vLLM {SUPPORTED}, this is vLLM {vllm.__version__}: "
               "vLLM runs its own layers (install a supported vLLM or a mixboard-vllm that supports this one)")
        if strict():
            raise RuntimeError(msg + " [MIXBOARD_STRICT_PLUGINS is set]")
        _logger().warning(msg)
        return
    from . import compat, ops
    from .layers import register_layers
    from .plan import on_layer_built

    compat.override_attention_backend()
    ops.register()
    compat.split_graph_at(ops.QUALIFIED)
    compat.on_mixer_layer_built(on_layer_built)
    kinds = ["attention", *register_layers()]
    _logger().info("mixboard-vllm %s: %s layers run through mixboard's registry", __version__, ", ".join(kinds))
