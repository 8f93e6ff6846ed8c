"""mixboard-triton: mixboard's own Triton kernels for the attention, short_conv,
mamba1 and moe kinds, on any GPU Triton compiles for (NVIDIA, AMD through ROCm,
Intel through XPU), and on CPU under Triton's interpreter for testing.

Importing this package imports neither torch nor triton: the kernels are
imported when a backend is built.
"""

__version__ = "0.1.0"
