"""The plugin entry point in this process: the switch, the version gate, what it registers."""

import pytest
import vllm
from vllm.v1.attention.backends.registry import AttentionBackendEnum

import mixboard_vllm
from mixboard_vllm.version import supported

NATIVE = "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"


@pytest.fixture
def fresh(monkeypatch):
    """register() as in a new process; vLLM's registry restored afterwards."""
    from vllm.v1.attention.backends import registry

    monkeypatch.setattr(mixboard_vllm, "_registered", False)
    monkeypatch.setattr(registry, "_ATTN_OVERRIDES", dict(registry._ATTN_OVERRIDES))
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
