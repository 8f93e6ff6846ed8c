"""The ``short_conv_cpu`` impl: the whole step in one C call (``_gated_conv.c``,
built for float32 and for bfloat16 layers); ``short_conv_torch``'s where an
input is not what the kernel reads. A pool whose records sit in larger pages
(an engine's hybrid cache) is read in place: the kernel takes its record
stride."""

from __future__ import annotations

import importlib

import torch

from mixboard.ops.checks import record_stride
from mixboard.ops.slot_step import SlotStep

from .declarations import KERNELS
from .inputs import check_inputs
from .torch_impl import ShortConvTorchImpl


class ShortConvCpuImpl(ShortConvTorchImpl):
    _prepared: tuple[object, torch.Tensor, torch.Tensor | None] | None = None

    def __init__(self, spec):
        super().__init__(spec)
        # imported after torch: the kernel then shares torch's OpenMP runtime
        self._kernel = importlib.import_module(KERNELS[spec.dtype])

    def forward(self, B, C, x, weights, state, meta):
        meta = SlotStep.of(self.layer_name, meta, self.spec.conv_width)
        pool = check_inputs(self.layer_name, self.want, B, C, x, weights, state, meta)
        # check_inputs holds the pool to the state contract: records contiguous, a record or more apart
        if not (x.dtype == pool.dtype == self.want.dtype and B.stride(-1) == C.stride(-1) == x.stride(-1) == 1):
            return super().forward(B, C, x, weights, state, meta)
        if self._prepared is None or self._prepared[0] is not weights:  # frozen records: laid out once
            bias = None if weights.conv_bias is None else weights.conv_bias.detach().float().contiguous()
            self._prepared = (weights, weights.conv_weight.detach().float().t().contiguous(), bias)
        _, wt, bias = self._prepared
        seqs = meta.common.sequence_rows
        T, D = x.shape
        y = torch.empty(T, D, dtype=x.dtype)
        self._kernel.step(B.data_ptr(), B.stride(0), C.data_ptr(), C.stride(0), x.data_ptr(), x.stride(0), D,
                          self.spec.conv_width, wt.data_ptr(), 0 if bias is None else bias.data_ptr(),
                          pool.data_ptr(), record_stride(pool, D * (self.spec.conv_width - 1)), y.data_ptr(), D,
                          seqs.data_ptr(), len(seqs))
        return y
