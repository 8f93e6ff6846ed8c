"""Entry point ``mamba1`` of distribution mixboard-mamba1."""

from mixboard import hookimpl

from .backends import Mamba1Cuda, Mamba1Torch
from .cpu_backend import Mamba1Cpu


@hookimpl
def mixboard_backends():
    return [Mamba1Torch, Mamba1Cpu, Mamba1Cuda]
