"""mixboard backends of the dense kinds on CPU, float32.

* ``linear_cpu``, ``embedding_cpu``: products on a weight stored as 16-row panels (``_panels.c``).
* ``rms_norm_cpu``, ``rotary_cpu``, ``argmax_cpu``: one C pass over each row (``_rows.c``).
* ``moe_cpu``: a mixture of experts, each expert's products on its panels (``_panels.c``).
* ``linear_onednn``, ``embedding_onednn``: torch's oneDNN product, pure Python (no build).

The C modules build at install where gcc with OpenMP is present (setup.py,
optional). Importing this package imports neither torch nor a kernel: the
impls load them when a backend is built.
"""

from .argmax_backend import ArgmaxCpu
from .embedding_backend import EmbeddingCpu
from .embedding_onednn_backend import EmbeddingOneDnn
from .linear_backend import LinearCpu
from .linear_onednn_backend import LinearOneDnn
from .moe_backend import MoECpu
from .rms_norm_backend import RMSNormCpu
from .rotary_backend import RotaryCpu

__all__ = ["ArgmaxCpu", "EmbeddingCpu", "EmbeddingOneDnn", "LinearCpu", "LinearOneDnn", "MoECpu", "RMSNormCpu",
           "RotaryCpu"]
__version__ = "0.1.0"
