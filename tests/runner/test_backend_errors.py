"""A backend that raises is named, with its layer and what it raised, in
one line: by the Engine as a BackendError, by `mixboard run` with exit 1."""

from __future__ import annotations

import pytest

import mixboard.registry
from checkpoints import make_checkpoint
from inprocess import mixboard_here
from mixboard.torch_ops.backends import PORTABLE_BACKENDS
from mixboard import Registry, get_registry
from mixboard.errors import BackendError
from mixboard_runner.engine import Engine
from mixboard_runner.sampling import SamplingParams


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    make_checkpoint("llama", directory)
    return directory


def broken(where: str):
    sdpa = get_registry().backends["sdpa"].cls

    class Broken(sdpa):
        name = "broken_sdpa"
        priority = 10**6

        @classmethod
        def make_impl(cls, spec, env):
            if where == "make_impl":
                raise RuntimeError("no kernel for this shape\nsecond line")
            impl = super().make_impl(spec, env)
            if where == "forward":
                forward = impl.forward

                class Impl:
                    def forward(self, *args):
                        raise ZeroDivisionError("kernel fault")

                    def __getattr__(self, name):
                        return getattr(impl, name)
                return Impl()
            return impl

        @classmethod
        def builder(cls, spec, env):
            build = super().builder(spec, env)
            if where != "builder":
                return build

            class Builder:
                def __call__(self, common):
                    raise IndexError("bad block table")
            return Builder()

    return Registry.from_backends([Broken, *PORTABLE_BACKENDS])


@pytest.mark.parametrize("where, said", [
    ("make_impl", "raised RuntimeError making its impl: no kernel for this shape"),
    ("builder", "raised IndexError while it ran: bad block table"),
    ("forward", "raised ZeroDivisionError while it ran: kernel fault"),
])
def test_a_raising_backend_is_named_with_its_layer(llama, where, said):
    with pytest.raises(BackendError) as info:
        engine = Engine(llama, registry=broken(where))
        engine.generate([[1, 2, 3]], SamplingParams(max_tokens=2))
    message = str(info.value)
    assert message.startswith("backend 'broken_sdpa' of layer 'model.layers.0.self_attn' ") and said in message
    assert "\n" not in message and info.value.__cause__ is not None


def test_mixboard_run_says_it_in_one_line_with_exit_1(llama, monkeypatch, capsys):
    monkeypatch.setattr(mixboard.registry, "_REGISTRY", broken("forward"))
    status, err = mixboard_here(capsys, "run", llama, "--prompt-ids", "1,2")
    assert status == 1 and err.splitlines() == [
        "mixboard run: backend 'broken_sdpa' of layer 'model.layers.0.self_attn' raised ZeroDivisionError while "
        "it ran: kernel fault"]


def test_an_error_outside_any_backend_is_not_blamed_on_one(llama, monkeypatch):
    import mixboard_runner.engine as engine_module

    engine = Engine(llama)

    def sample(*args):
        raise RuntimeError("sampler fault")

    monkeypatch.setattr(engine_module, "sample", sample)
    with pytest.raises(RuntimeError, match="sampler fault"):
        engine.generate([[1, 2, 3]], SamplingParams(max_tokens=2))
