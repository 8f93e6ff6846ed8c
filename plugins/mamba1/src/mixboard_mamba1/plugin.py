"""Entry point ``mamba1`` of distribution mixboard-mamba1."""

from mixboard import hookimpl

from .cpu_backend import Mamba1Cpu
from .cuda_backend import Mamba1Cuda
from .torch_backend import Mamba1Torch


@hookimpl
def mixboard_backends():
    return [Mamba1Torch, Mamba1Cpu, Mamba1Cuda]
