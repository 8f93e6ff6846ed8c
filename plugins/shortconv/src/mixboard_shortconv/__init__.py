"""mixboard backends for the ``short_conv`` kind (LFM2's gated short conv).

* ``short_conv_torch``: portable PyTorch, any torch device.
* ``short_conv_cpu``: a whole step in one C call (CPU, float32 or bfloat16; built by setup.py, optional).
* ``short_conv_cuda``: causal-conv1d's CUDA kernels (``pip install 'mixboard-shortconv[cuda]'``).

Importing this package imports neither torch nor causal_conv1d: the impls
load them when a backend is built.
"""

from .cpu_backend import ShortConvCpu
from .cuda_backend import ShortConvCuda
from .torch_backend import ShortConvTorch

__all__ = ["ShortConvCpu", "ShortConvCuda", "ShortConvTorch"]
__version__ = "0.1.0"
