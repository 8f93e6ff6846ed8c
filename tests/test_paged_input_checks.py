"""``check_paged_inputs`` first compares all of a step's inputs at once and goes
through them one by one only when something does not fit (every attention
layer runs it on every step, inside engines too). The one-by-one checks are
the reference: for every input, good or bad, both must agree on whether it
passes, and a refusal keeps the message that names what is wrong."""

from __future__ import annotations

import pytest
import torch

from mixboard import AttentionSpec
from mixboard.dtypes import dtype_name
from mixboard.ops.checks import BackendInputError
from mixboard.ops.paged import _check_one_by_one, check_paged_inputs

SPEC = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=8, dtype="float32")
T, BLOCKS, BS = 3, 5, 4


def step(layout: str = "contiguous"):
    q, k, v = torch.randn(T, 4, 8), torch.randn(T, 2, 8), torch.randn(T, 2, 8)
    if layout == "contiguous":
        state = {"k_cache": torch.zeros(BLOCKS, BS, 2, 8), "v_cache": torch.zeros(BLOCKS, BS, 2, 8)}
    else:  # an engine's hybrid cache: k|v of a block side by side in one padded page (LBHNC)
        pages = torch.zeros(BLOCKS, 2 * BS * 16 + 24)
        kv = pages[:, :2 * BS * 16].view(BLOCKS, 2, BS, 2, 8)
        state = {"k_cache": kv[:, 0], "v_cache": kv[:, 1]}
    return {"q": q, "k": k, "v": v, "state": state, "range": (0, BLOCKS - 1)}


def overlapping(pool):  # records closer than a record's size: writing one would change the next
    return pool.as_strided(pool.shape, (8, *pool.stride()[1:]))


MUTATIONS = {
    "as is": lambda s: None,
    "q heads": lambda s: s.update(q=s["q"][:, :3]),
    "q rows": lambda s: s.update(q=s["q"][:2]),
    "q rank": lambda s: s.update(q=s["q"].reshape(T, 32)),
    "q not a tensor": lambda s: s.update(q=s["q"].tolist()),
    "k head size": lambda s: s.update(k=torch.randn(T, 2, 4)),
    "v kv heads": lambda s: s.update(v=torch.randn(T, 4, 8)),
    "q dtype": lambda s: s.update(q=s["q"].double()),
    "k dtype": lambda s: s.update(k=s["k"].half()),
    "v device": lambda s: s.update(v=s["v"].to("meta")),
    "k device": lambda s: s.update(k=s["k"].to("meta")),
    "no v_cache": lambda s: s["state"].pop("v_cache"),
    "state not a mapping": lambda s: s.update(state=[s["state"]["k_cache"], s["state"]["v_cache"]]),
    "pool block size": lambda s: s["state"].update(k_cache=torch.zeros(BLOCKS, BS + 1, 2, 8)),
    "pool head size": lambda s: s["state"].update(v_cache=torch.zeros(BLOCKS, BS, 2, 4)),
    "pools disagree on blocks": lambda s: s["state"].update(v_cache=s["state"]["v_cache"][:BLOCKS - 1]),
    "pool dtype": lambda s: s["state"].update(v_cache=s["state"]["v_cache"].bfloat16()),
    "pool device": lambda s: s["state"].update(k_cache=torch.zeros(BLOCKS, BS, 2, 8, device="meta")),
    "pool record transposed": lambda s: s["state"].update(
        k_cache=s["state"]["k_cache"].transpose(2, 3).contiguous().transpose(2, 3)),
    "pool records overlap": lambda s: s["state"].update(k_cache=overlapping(s["state"]["k_cache"])),
    "range past the pool": lambda s: s.update(range=(0, BLOCKS)),
    "range below 0": lambda s: s.update(range=(-1, 2)),
    "empty range": lambda s: s.update(range=(0, -1)),
}


def outcome(check, s) -> str:
    try:
        k_cache, v_cache = check("layer0", SPEC, s["q"], s["k"], s["v"], s["state"], T, BS, s["range"])
    except BackendInputError as e:
        return f"refused: {e}"
    except Exception as e:  # noqa: BLE001 - compared, not hidden: both checks must fail the same way
        return f"{type(e).__name__}: {e}"
    assert k_cache is s["state"]["k_cache"] and v_cache is s["state"]["v_cache"]
    return "passed"


@pytest.mark.parametrize("layout", ["contiguous", "pages"])
@pytest.mark.parametrize("name", MUTATIONS)
def test_the_quick_comparison_agrees_with_the_checks_one_by_one(name, layout):
    s = step(layout)
    MUTATIONS[name](s)
    got, want = outcome(check_paged_inputs, s), outcome(_check_one_by_one, s)
    assert got == want
    assert (got == "passed") == (name in ("as is", "empty range")), got


def test_a_refusal_names_the_layer_and_what_arrived():
    s = step()
    s["k"] = s["k"].half()
    with pytest.raises(BackendInputError, match=r"^layer0: k must be torch.float32, got torch.float16$"):
        check_paged_inputs("layer0", SPEC, s["q"], s["k"], s["v"], s["state"], T, BS, s["range"])


@pytest.mark.parametrize("layout", ["contiguous", "pages"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inputs_that_fit_pass_on_the_quick_comparison_alone(monkeypatch, layout, dtype):
    """Else the quick path could fall through on every step, every test above still passing, and the
    time it saves would be gone without a word."""
    import mixboard.ops.paged as paged

    def one_by_one(*args):
        raise AssertionError("the checks one by one ran on inputs that fit")

    monkeypatch.setattr(paged, "_check_one_by_one", one_by_one)
    s = step(layout)
    spec = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=8, dtype=dtype_name(dtype))
    q, k, v = (s[name].to(dtype) for name in ("q", "k", "v"))
    state = {name: pool.to(dtype) for name, pool in s["state"].items()}
    assert check_paged_inputs("layer0", spec, q, k, v, state, T, BS, s["range"]) == (state["k_cache"],
                                                                                      state["v_cache"])


@pytest.mark.parametrize("moved", ["none", "k", "v", "k_cache", "v_cache"])
def test_an_input_on_another_gpu_of_the_same_type_is_refused(moved):
    """Two GPUs of one type: q on cuda:0 and a pool on cuda:1 must not pass on the device type alone
    (a kernel would read the other GPU's memory). Fake tensors (no memory, no CUDA needed) carry the
    device indices on this CPU machine."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        s = step()
        s = {**s, "q": s["q"].to("cuda:0"), "k": s["k"].to("cuda:0"), "v": s["v"].to("cuda:0"),
             "state": {name: pool.to("cuda:0") for name, pool in s["state"].items()}}
        if moved in ("k", "v"):
            s[moved] = s[moved].to("cuda:1")
        elif moved != "none":
            s["state"][moved] = s["state"][moved].to("cuda:1")
        got, want = outcome(check_paged_inputs, s), outcome(_check_one_by_one, s)
    assert got == want
    if moved == "none":
        assert got == "passed"
    else:
        assert got.startswith("refused: layer0: ") and got.endswith("must be on cuda:0, got cuda:1"), got


def test_a_device_named_without_an_index_asks_only_for_the_type():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mixboard.ops.checks import expect

    with FakeTensorMode():
        x = torch.empty(2, device="cuda:1")
    expect("layer0", "x", x, (2,), device="cuda")  # a declaration's device: any GPU of the type
    expect("layer0", "x", x, (2,), device=torch.device("cuda:1"))
    with pytest.raises(BackendInputError, match=r"^layer0: x must be on cuda:0, got cuda:1$"):
        expect("layer0", "x", x, (2,), device=torch.device("cuda:0"))
    with pytest.raises(BackendInputError, match=r"^layer0: x must be on cpu, got cuda:1$"):
        expect("layer0", "x", x, (2,), device="cpu")
