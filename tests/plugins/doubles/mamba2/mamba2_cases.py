"""Shared helpers of the mamba2 plugin's tests: specs, random weights and
inputs, and running one step of a backend (through its builder) or of the
oracle."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from mixboard import CommonBatchMetadata, Mamba2Spec, Mamba2Weights, simulate
from mixboard.kinds.mamba2 import mamba2_state
from mixboard.ops.checks import build_impl
from mixboard.testing import Mamba2Oracle, allocate_state

CPU = simulate("cpu")
LAYER = "model.layers.7.mixer"


def small_spec(**overrides) -> Mamba2Spec:
    fields = dict(num_heads=4, head_dim=8, d_state=16, n_groups=2, d_conv=4, chunk_size=8)
    fields.update(overrides)
    return Mamba2Spec(**fields)


def random_weights(spec: Mamba2Spec, seed: int = 0, dtype=torch.float32) -> Mamba2Weights:
    g = torch.Generator().manual_seed(seed)
    H = spec.num_heads

    def rand(*shape, scale=1.0, shift=0.0):
        return (torch.rand(*shape, generator=g) * scale + shift).to(dtype)

    return Mamba2Weights(
        conv_weight=rand(spec.conv_dim, spec.d_conv, scale=1.0, shift=-0.5),
        conv_bias=rand(spec.conv_dim, scale=0.2, shift=-0.1) if spec.conv_bias else None,
        dt_bias=rand(H, scale=2.0, shift=-1.0),
        A=-torch.arange(1, H + 1, dtype=torch.float32) * rand(H, scale=0.5, shift=0.1).float(),
        D=rand(H, scale=2.0, shift=-1.0),
        norm_weight=rand(spec.d_inner, scale=1.0, shift=0.5),
    )


@dataclass
class Inputs:
    z: torch.Tensor
    xBC: torch.Tensor
    dt: torch.Tensor

    def rows(self, start: int, end: int) -> "Inputs":
        return Inputs(self.z[start:end], self.xBC[start:end], self.dt[start:end])

    @staticmethod
    def cat(parts: list["Inputs"]) -> "Inputs":
        return Inputs(*(torch.cat([getattr(p, f) for p in parts]) for f in ("z", "xBC", "dt")))


def random_inputs(spec: Mamba2Spec, tokens: int, seed: int = 1, dtype=torch.float32) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    return Inputs(torch.randn(tokens, spec.d_inner, generator=g).to(dtype),
                  torch.randn(tokens, spec.conv_dim, generator=g).to(dtype),
                  torch.randn(tokens, spec.num_heads, generator=g).to(dtype))


def meta_for(query_lens, context_lens, slots) -> CommonBatchMetadata:
    n = len(query_lens)
    return CommonBatchMetadata.build(list(query_lens), list(context_lens), list(slots), [[]] * n, 16)


def fresh_state(spec: Mamba2Spec, slots: int = 10, fill: float | None = None) -> dict[str, torch.Tensor]:
    """Pools; ``fill`` puts that value in every record (a previous owner's leftovers)."""
    state = allocate_state(mamba2_state(spec), slots)
    if fill is not None:
        for pool in state.values():
            pool.fill_(fill)
    return state


class Runner:
    """One layer served by ``backend`` (through its builder), as the runner would."""

    def __init__(self, backend: type, spec: Mamba2Spec, weights: Mamba2Weights, env=CPU):
        self.spec, self.weights = spec, weights
        self.impl = build_impl(backend, spec, env, LAYER)
        self.build = backend.builder(spec, env)

    def __call__(self, inputs: Inputs, state, query_lens, context_lens, slots) -> torch.Tensor:
        meta = self.build(meta_for(query_lens, context_lens, slots))
        return self.impl.forward(inputs.z, inputs.xBC, inputs.dt, self.weights, state, meta)


class OracleRunner(Runner):
    def __init__(self, spec: Mamba2Spec, weights: Mamba2Weights):
        self.spec, self.weights = spec, weights
        self.impl = Mamba2Oracle(spec)
        self.build = lambda common: common
