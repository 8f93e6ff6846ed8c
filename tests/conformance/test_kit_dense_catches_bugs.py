"""The kit catches what the dense kinds' contract forbids: each rule of
``OpImpl`` broken on purpose in a copy of a first-party portable backend
(a subclass of its Backend and impl) must fail it, with a reason that names
the rule; the unmodified backends pass (test_kit_dense_first_party.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mixboard import Registry
from mixboard.testing.conformance import LinearConformance, run_suite
from mixboard.torch_ops.argmax import ArgmaxTorchImpl
from mixboard.torch_ops.backends import ArgmaxTorch, EmbeddingTorch, LinearTorch, RMSNormTorch, RotaryTorch
from mixboard.torch_ops.embedding import EmbeddingTorchImpl
from mixboard.torch_ops.linear import LinearTorchImpl
from mixboard.torch_ops.rms_norm import RMSNormTorchImpl
from mixboard.torch_ops.rotary import RotaryTorchImpl


def backend(base: type, impl: type, name: str) -> type:
    """A copy of a portable backend that builds ``impl``."""
    return type(name, (base,), {"name": name, "make_impl": classmethod(lambda cls, spec, env: impl(spec))})


def failures(cls, dtypes=("float32",), **kw) -> dict[str, str]:
    report = run_suite(cls, "cpu", dtypes, **kw)
    return {r.case: r.reason for r in report.results if r.status == "fail"}


def caught(cls, text: str, dtypes=("float32",), **kw) -> dict[str, str]:
    failed = failures(cls, dtypes, **kw)
    assert failed, f"{cls.name}: the kit let the planted bug pass"
    assert any(text in reason for reason in failed.values()), failed
    return failed


# --------------------------------------------------------------------------- wrong numbers


class SwappedGate(LinearTorchImpl):
    def forward(self, x):
        if not self.spec.gated:
            return super().forward(x)
        gate, up = F.linear(x, self.weight, self.bias).split(self.spec.out_features, dim=-1)
        return F.silu(up) * gate  # BUG: the gate applied to up's half


def test_a_swapped_gate_is_caught():
    failed = caught(backend(LinearTorch, SwappedGate, "linear_bug_gate"), "|backend - oracle|")
    assert "shape-gated[float32]" in failed and "rows[float32]" not in failed


class MeanOverOneMore(RMSNormTorchImpl):
    def _norm(self, s):
        sf = s.float()
        ms = sf.pow(2).sum(-1, keepdim=True) / (sf.shape[-1] + 1)  # BUG: the mean over one channel too many
        return self.weight * (sf * torch.rsqrt(ms + self.spec.eps)).to(self.dtype)


def test_a_norm_off_by_under_one_percent_is_caught():
    caught(backend(RMSNormTorch, MeanOverOneMore, "rms_norm_bug_mean"), "|backend - oracle|")


class RoundsTheResidual(RMSNormTorchImpl):
    def forward(self, x, residual):
        if residual is None or not self.spec.residual_fp32:
            return super().forward(x, residual)
        s = (x + residual.to(x.dtype)).float()  # BUG: the float32 residual rounded to the layer's dtype
        return self._norm(s), s


def test_a_float32_residual_rounded_to_bfloat16_is_caught():
    """bf16 x, float32 residual (Mamba's residual_in_fp32): s is held to float32's tolerance, whose
    rounding to bfloat16 (about 1e-2) is well within bfloat16's."""
    failed = caught(backend(RMSNormTorch, RoundsTheResidual, "rms_norm_bug_rounds_residual"),
                    "result 's' row", dtypes=("bfloat16",))
    assert set(failed) == {"shape-residual_fp32[bfloat16]"}, failed
    assert "forward(x, residual)" in failed["shape-residual_fp32[bfloat16]"]
    assert not failures(backend(RMSNormTorch, RoundsTheResidual, "rms_norm_bug_rounds_residual"))  # float32


# --------------------------------------------------------------------------- inputs written


class AddsIntoX(RMSNormTorchImpl):
    def forward(self, x, residual):
        if residual is None:
            return super().forward(x, residual)
        s = x.add_(residual)  # BUG: the sum written into x, the branch's output, not into the residual handed over
        return self._norm(s), s


def test_writing_its_input_x_is_caught():
    caught(backend(RMSNormTorch, AddsIntoX, "rms_norm_bug_writes_x"), "changed its input 'x' in place")


class WritesPastK(RotaryTorchImpl):
    """Rotates q and k in place, then clears the head after k's last (the v of a fused qkv buffer)."""

    def forward(self, positions, q, k):
        q2, k2 = super().forward(positions, q, k)
        q.copy_(q2)
        k.copy_(k2)
        if k._base is not None:
            end = k.storage_offset() + k.shape[1] * k.shape[2]
            k._base.view(-1)[end:end + 4].zero_()  # BUG: past the end of k's first row
        return q, k


def test_writing_past_a_handed_over_view_is_caught():
    failed = caught(backend(RotaryTorch, WritesPastK, "rotary_bug_writes_v"), "wrote outside its inputs")
    assert "rows[float32]" not in failed  # in place on handed-over q and k is allowed


# --------------------------------------------------------------------------- results that are not the caller's own


class ViewOfTheTable(EmbeddingTorchImpl):
    def forward(self, ids):
        if ids.numel() == 1:  # BUG: a decode's row as a view of the table, no copy
            return self.weight[int(ids[0]):int(ids[0]) + 1]
        return super().forward(ids)


def test_a_result_aliasing_a_weight_is_caught():
    caught(backend(EmbeddingTorch, ViewOfTheTable, "embedding_bug_view"), "shares memory with the layer's weight")


class ReusedOutput(LinearTorchImpl):
    """Keeps one output buffer per row count and hands it out every call."""

    def forward(self, x):
        out = getattr(self, "_out", {}).get(x.shape[0])
        if out is None:
            self._out = {**getattr(self, "_out", {}), x.shape[0]: torch.empty(x.shape[0], self.spec.out_features,
                                                                               dtype=x.dtype, device=x.device)}
            out = self._out[x.shape[0]]
        return out.copy_(super().forward(x))  # BUG: the last result changes at the next call


def test_a_reused_output_buffer_is_caught():
    caught(backend(LinearTorch, ReusedOutput, "linear_bug_workspace"), "return a tensor of its own")


class ClassWeights(LinearTorchImpl):
    shared = {}

    def load(self, weights):
        ClassWeights.shared["w"] = (weights.weight, weights.bias)  # BUG: one store for every layer

    def forward(self, x):
        self.weight, self.bias = ClassWeights.shared["w"]
        return super().forward(x)


def test_layers_sharing_one_store_is_caught():
    failed = caught(backend(LinearTorch, ClassWeights, "linear_bug_class_store"), "layer 0")
    assert set(failed) == {"interleaved[float32]"}


class ScalesInPlace(LinearTorchImpl):
    def load(self, weights):
        super().load(weights)
        self.weight.mul_(2.0)  # BUG: prepares the caller's tensor in place

    def forward(self, x):
        return F.linear(x, self.weight / 2.0, self.bias)


def test_changing_the_weights_in_load_is_caught():
    caught(backend(LinearTorch, ScalesInPlace, "linear_bug_load"), "changed the layer's weight 'weight'")


# --------------------------------------------------------------------------- form


class Float32Out(RMSNormTorchImpl):
    def forward(self, x, residual):
        y, s = super().forward(x, residual)
        return y.float(), s  # BUG: the norm left in float32


def test_a_result_of_the_wrong_dtype_is_caught():
    caught(backend(RMSNormTorch, Float32Out, "rms_norm_bug_dtype"), "is torch.float32, expected torch.bfloat16",
           dtypes=("bfloat16",))


class OnlyY(RMSNormTorchImpl):
    def forward(self, x, residual):
        return super().forward(x, residual)[0]  # BUG: the residual sum not returned


def test_a_result_of_the_wrong_form_is_caught():
    caught(backend(RMSNormTorch, OnlyY, "rms_norm_bug_form"), "expected a tuple of 2 tensors (y, s)")


# --------------------------------------------------------------------------- rotary's memo


class StaleRows(RotaryTorchImpl):
    def forward(self, positions, q, k):
        if self._positions is None or positions.shape != self._positions.shape:  # BUG: keyed on the shape
            self._rows = self._gather(positions)
            self._positions = positions
        cos, sin = self._rows
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)


def test_a_stale_positions_memo_is_caught():
    failed = caught(backend(RotaryTorch, StaleRows, "rotary_bug_stale"), "step 2 of 3")
    assert "interleaved[float32]" in failed  # two steps of 16 rows: new positions, same shape


class FixedTable(RotaryTorchImpl):
    def _gather(self, positions):
        if self._cos is None:
            self._cos, self._sin = __import__("mixboard.ops.rope", fromlist=["cos_sin"]).cos_sin(
                self.spec, 256, self.dtype, positions.device)
        return self._cos[positions.clamp(max=255)].unsqueeze(1), self._sin[positions.clamp(max=255)].unsqueeze(1)


def test_a_table_that_never_grows_is_caught():
    caught(backend(RotaryTorch, FixedTable, "rotary_bug_table"), "|backend - oracle|")


# --------------------------------------------------------------------------- argmax's rules


class LastOnTies(ArgmaxTorchImpl):
    def forward(self, logits):
        return logits.shape[-1] - 1 - logits.flip(-1).argmax(-1)  # BUG: the last of equal values


def test_the_tie_rule_is_caught():
    failed = caught(backend(ArgmaxTorch, LastOnTies, "argmax_bug_ties"), "row 0")
    assert "exactly" in next(iter(failed.values()))


class IgnoresNaN(ArgmaxTorchImpl):
    def forward(self, logits):
        return logits.nan_to_num(nan=float("-inf")).argmax(-1)  # BUG: a NaN row gives its largest number


def test_the_nan_rule_is_caught():
    caught(backend(ArgmaxTorch, IgnoresNaN, "argmax_bug_nan"), "row 1")


class IgnoresRowStride(ArgmaxTorchImpl):
    def forward(self, logits):
        rows = torch.as_strided(logits, logits.shape, (logits.shape[1], 1))  # BUG: rows assumed packed
        return rows.argmax(-1)


def test_ignoring_the_row_stride_is_caught():
    failed = caught(backend(ArgmaxTorch, IgnoresRowStride, "argmax_bug_stride"), "strided")
    assert "rows[float32]" not in failed


# --------------------------------------------------------------------------- declarations


def test_expected_failures_and_tolerances_work_as_for_mixer_kinds():
    gate = backend(LinearTorch, SwappedGate, "linear_bug_gate_declared")
    registry = Registry.from_backends([gate])
    report = run_suite("linear_bug_gate_declared", "cpu", ("float32",), registry=registry,
                       expected_failures={"shape-gated": "gate on the wrong half (planted)",
                                          "shape-gated_bias": "the same", "shape-odd_gated": "the same",
                                          "shape-mlp512": "the same"})
    assert report.ok and report.counts()["xfail"] == 4
    strict = run_suite(LinearTorch, "cpu", ("float32",), expected_failures={"rows": "does not fail"})
    assert not strict.ok and "but passed" in next(r.reason for r in strict.results if r.case == "rows[float32]")
    tight = run_suite(LinearTorch, "cpu", ("bfloat16",), tolerances={"bfloat16": 1e-6}, select=["shape-gated"])
    assert not tight.ok and "> tolerance 1e-06" in tight.results[0].reason


def test_a_suite_class_declares_expected_failures():
    class Declared(LinearConformance):
        backend = backend(LinearTorch, SwappedGate, "linear_bug_gate_suite")
        dtypes = ("float32",)
        expected_failures = {"shape-gated": "planted"}

    cases = dict((c.id, reason) for c, reason in Declared.conformance_cases())
    assert cases["shape-gated[float32]"] == "planted"
    case = next(c for c, _ in Declared.conformance_cases() if c.id == "shape-gated[float32]")
    assert Declared.run(case).status == "xfail"
