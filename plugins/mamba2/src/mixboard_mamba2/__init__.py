"""mixboard-mamba2: Mamba-2 backends for mixboard.

* ``mamba2_torch``: plain PyTorch, any torch device.
* ``mamba2_cpu``: ``mamba2_torch`` with the prefills' SSD scan in C (CPU,
  float32; built by setup.py, optional).
* ``mamba2_triton``: mamba-ssm's Triton SSD kernels (CUDA; extra ``triton``).

Importing this package imports neither torch nor mamba-ssm.
"""

__version__ = "0.1.0"
