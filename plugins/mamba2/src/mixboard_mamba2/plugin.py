"""Entry point ``mamba2``: the Mamba-2 backends of this distribution."""

from mixboard import hookimpl

from .cpu_backend import Mamba2Cpu
from .torch_backend import Mamba2Torch
from .triton_backend import Mamba2Triton


@hookimpl
def mixboard_backends():
    return [Mamba2Torch, Mamba2Cpu, Mamba2Triton]
