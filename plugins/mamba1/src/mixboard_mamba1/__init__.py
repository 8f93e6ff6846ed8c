"""mixboard backends for the ``mamba1`` kind (Mamba's selective scan).

* ``mamba1_torch``: portable PyTorch on any device; a chunked scan for
  prefills and one fused update per step for decodes.
* ``mamba1_cpu``: ``mamba1_torch`` with each decode-only step in one C call
  (CPU, float32 or bfloat16 with the SSM state float32; built by setup.py, optional).
* ``mamba1_cuda``: the fused kernels of mamba-ssm and causal-conv1d
  (``pip install 'mixboard-mamba1[cuda]'``).

Importing this package imports neither torch nor the kernel libraries; the
backends load them when a layer is built.
"""

__version__ = "0.1.0"
