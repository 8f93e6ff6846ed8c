"""The plugin entry point in this process: the switch, the version gate, what it registers."""

import pytest
import vllm
from vllm.v1.attention.backends.registry import AttentionBackendEnum

import mixboard_vllm
from mixboard_vllm.version import supported

NATIVE = "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"


@pytest.fixture
def fresh(monkeypatch):
    """register() as in a new process; vLLM's registries and torch's module hooks restored afterwards."""
    from torch.nn.modules import module
    from vllm.model_executor import custom_op
    from vllm.v1.attention.backends import registry

    monkeypatch.setattr(mixboard_vllm, "_registered", False)
    monkeypatch.setattr(registry, "_ATTN_OVERRIDES", dict(registry._ATTN_OVERRIDES))
    monkeypatch.setattr(custom_op, "op_registry_oot", {
        name: cls for name, cls in custom_op.op_registry_oot.items() if not cls.__module__.startswith("mixboard_vllm")})
    monkeypatch.setattr(module, "_global_module_registration_hooks", type(module._global_module_registration_hooks)())
    return registry


def test_supported_range():
    assert supported("0.32.0") and supported("0.32.7") and supported("0.32.0rc1")
    assert not supported("0.31.9") and not supported("0.33.0") and not supported("1.0.0") and not supported("dev")
    assert supported(vllm.__version__)


def test_entry_point_is_declared():
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "mixboard"]
    assert ep.value == "mixboard_vllm:register"


def test_register_overrides_cpu_attention(fresh, monkeypatch):
    monkeypatch.delenv("MIXBOARD_VLLM", raising=False)
    mixboard_vllm.register()
    assert AttentionBackendEnum.CPU_ATTN.get_path() == "mixboard_vllm.attention.MixboardAttentionBackend"


def test_off_switch_leaves_vllm_untouched(fresh, monkeypatch):
    monkeypatch.setenv("MIXBOARD_VLLM", "0")
    mixboard_vllm.register()
    assert AttentionBackendEnum.CPU_ATTN.get_path() == NATIVE


def test_unsupported_vllm_one_line_and_untouched(fresh, monkeypatch, caplog):
    monkeypatch.delenv("MIXBOARD_VLLM", raising=False)
    monkeypatch.delenv("MIXBOARD_STRICT_PLUGINS", raising=False)
    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    warned = []
    monkeypatch.setattr(mixboard_vllm, "_logger", lambda: type("L", (), {"warning": warned.append})())
    mixboard_vllm.register()
    assert AttentionBackendEnum.CPU_ATTN.get_path() == NATIVE
    assert len(warned) == 1 and "supports vLLM >=0.32,<0.33, this is vLLM 0.99.0" in warned[0]


def test_unsupported_vllm_is_an_error_under_strict_plugins(fresh, monkeypatch):
    monkeypatch.delenv("MIXBOARD_VLLM", raising=False)
    monkeypatch.setenv("MIXBOARD_STRICT_PLUGINS", "1")
    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    with pytest.raises(RuntimeError, match="supports vLLM >=0.32,<0.33, this is vLLM 0.99.0"):
        mixboard_vllm.register()
    assert AttentionBackendEnum.CPU_ATTN.get_path() == NATIVE


def test_a_layer_vllm_would_run_itself_fails_start_up_as_it_is_built(fresh, monkeypatch, checkpoint):
    """What happens on CUDA without --attention-backend CUSTOM, or when a model hands Attention
    vLLM's own backend class: the layer is refused by name as the model assigns it."""
    import torch
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    from mixboard_vllm.errors import StartupError

    monkeypatch.delenv("MIXBOARD_VLLM", raising=False)
    mixboard_vllm.register()
    config = VllmConfig(model_config=ModelConfig(model=checkpoint("llama"), dtype="float32", skip_tokenizer_init=True))
    with set_current_vllm_config(config):
        ours = Attention(num_heads=2, head_size=64, scale=0.125, prefix="model.layers.0.self_attn.attn")
        theirs = Attention(num_heads=2, head_size=64, scale=0.125, prefix="model.layers.1.self_attn.attn",
                           attn_backend=CPUAttentionBackend)
    model = torch.nn.Module()
    model.ours = ours  # mixboard's backend: accepted
    with pytest.raises(StartupError, match=r"^mixboard-vllm: layer model\.layers\.1\.self_attn\.attn got vLLM's own "
                                           r"attention backend CPU_ATTN, not mixboard's: .*--attention-backend CUSTOM"):
        model.theirs = theirs
