"""Every bad value of config.json is one line on stderr and exit status 2, from
`mixboard run` and `mixboard explain` alike, checked before anything is built."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from checkpoints import CONFIGS
from inprocess import assert_one_line_error, mixboard_here
from mixboard_runner.models.config import MAX_LAYERS, MAX_SIZE, ConfigReader, ModelError

DROP = object()  # an edit that removes the key
RUN = ("--prompt-ids", "1,2", "--max-tokens", "2")


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, dict]:
    """The config.json transformers writes for each test architecture."""
    out = {}
    for model_type, make in CONFIGS.items():
        directory = tmp_path_factory.mktemp(model_type)
        make().save_pretrained(directory)
        out[model_type] = json.loads((directory / "config.json").read_text())
    return out


def write_config(directory: Path, config: dict, edit: dict) -> Path:
    config = dict(config)
    for key, value in edit.items():
        if value is DROP:
            config.pop(key, None)
        else:
            config[key] = value
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


ROPE = {"rope_type": "default", "rope_theta": 10000.0}
CASES = [
    ("llama", {"num_attention_heads": 0}, "'num_attention_heads' must be an integer from 1 to 16777216, not 0"),
    ("llama", {"num_attention_heads": -4}, "'num_attention_heads' must be an integer from 1 to 16777216, not -4"),
    ("llama", {"num_key_value_heads": 0}, "'num_key_value_heads' must be an integer from 1 to 16777216, not 0"),
    ("llama", {"hidden_size": -64}, "'hidden_size' must be an integer from 1 to 16777216, not -64"),
    ("llama", {"head_dim": 0}, "'head_dim' must be an integer from 1 to 16777216, not 0"),
    ("llama", {"intermediate_size": 0}, "'intermediate_size' must be an integer from 1 to 16777216, not 0"),
    ("llama", {"vocab_size": 10 ** 12}, "'vocab_size' must be an integer from 1 to 16777216, not 1000000000000"),
    ("llama", {"hidden_size": "64"}, "'hidden_size' must be an integer from 1 to 16777216, not '64'"),
    ("llama", {"num_hidden_layers": 2.0}, "'num_hidden_layers' must be an integer from 1 to 1024, not 2.0"),
    ("llama", {"num_key_value_heads": 3}, "'num_attention_heads' (4) must be a multiple of 'num_key_value_heads' (3)"),
    ("llama", {"num_attention_heads": 6, "head_dim": DROP},
     "'hidden_size' (64) must be a multiple of 'num_attention_heads' (6) (head_dim is not given)"),
    ("llama", {"rope_parameters": {**ROPE, "rope_theta": "a lot"}},
     "'rope_parameters.rope_theta' must be a finite number above 0, not 'a lot'"),
    ("llama", {"rope_theta": [10000]}, "'rope_theta' must be a finite number above 0, not [10000]"),
    ("llama", {"rope_parameters": {**ROPE, "rope_theta": 0}}, "'rope_parameters.rope_theta' must be a finite number"),
    ("llama", {"rope_parameters": "default"}, "'rope_parameters' must be an object, not 'default'"),
    ("llama", {"partial_rotary_factor": 0.01}, "head_dim x partial_rotary_factor (0.01) gives 0"),
    ("llama", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
     "'rope_scaling' has rope type 'yarn', which mixboard does not support (supported: default, linear, llama3)"),
    ("llama", {"rope_scaling": {"rope_type": "linear", "factor": "two"}},
     "'rope_scaling.factor' must be a finite number above 0, not 'two'"),
    ("llama", {"rms_norm_eps": -1e-6}, "'rms_norm_eps' must be a finite number >= 0, not -1e-06"),
    ("llama", {"sliding_window": 0}, "'sliding_window' must be an integer >= 1, not 0"),
    ("llama", {"eos_token_id": "</s>"}, "'eos_token_id' must be a token id or a list of token ids (integers >= 0), "
                                        "not '</s>'"),
    ("llama", {"eos_token_id": ["1", "2"]}, "'eos_token_id' must be a token id or a list of token ids"),
    ("llama", {"eos_token_id": [[2]]}, "not [[2]]"),
    ("llama", {"eos_token_id": True}, "not True"),
    ("llama", {"hidden_size": None}, "config.json has no 'hidden_size', which a llama model needs"),
    ("llama", {"model_type": ["llama"]}, "model_type ['llama'] is not supported"),
    ("mamba", {"state_size": 0}, "'state_size' must be an integer from 1 to 16777216, not 0"),
    ("mamba", {"conv_kernel": 1}, "'conv_kernel' must be an integer from 2 to 16777216, not 1"),
    ("mamba", {"time_step_rank": "8"}, "'time_step_rank' must be an integer from 1 to 16777216, not '8'"),
    ("mamba", {"intermediate_size": DROP, "expand": 2 ** 20}, "expand x hidden_size is 67108864; it must be from 1"),
    ("mamba2", {"n_groups": 3}, "'num_heads' (8) must be a multiple of 'n_groups' (3)"),
    ("mamba2", {"num_heads": 3}, "num_heads (3) x head_dim (16) must equal expand x hidden_size (128)"),
    ("mamba2", {"num_heads": -8}, "'num_heads' must be an integer from 1 to 16777216, not -8"),
    ("mamba2", {"expand": "2"}, "'expand' must be a finite number above 0, not '2'"),
    ("mamba2", {"chunk_size": 0}, "'chunk_size' must be an integer from 1 to 16777216, not 0"),
    ("mamba2", {"time_step_limit": [0.1, 0.0]}, "'time_step_limit' must be [low, high] with 0 <= low <= high"),
    ("lfm2", {"num_key_value_heads": 3}, "'num_attention_heads' (4) must be a multiple of 'num_key_value_heads' (3)"),
    ("lfm2", {"conv_L_cache": 0}, "'conv_L_cache' must be an integer from 2 to 16777216, not 0"),
    ("lfm2", {"block_ffn_dim_multiplier": "1.0"}, "'block_ffn_dim_multiplier' must be a finite number above 0"),
    ("lfm2", {"layer_types": ["conv", "sliding", "conv", "full_attention"]},
     "'layer_types' must be a list of 'conv' or 'full_attention'"),
    ("bamba", {"mamba_n_groups": 3}, "'mamba_n_heads' (8) must be a multiple of 'mamba_n_groups' (3)"),
    ("bamba", {"mamba_d_state": 0}, "'mamba_d_state' must be an integer from 1 to 16777216, not 0"),
    ("bamba", {"attn_layer_indices": [[1], [3]]}, "'attn_layer_indices' must be a list of layer indices"),
    ("bamba", {"rope_parameters": {**ROPE, "partial_rotary_factor": -0.5}},
     "'rope_parameters.partial_rotary_factor' must be a finite number above 0, not -0.5"),
    # options the runner does not implement: refused at load, naming the field
    ("falcon_h1", {"mamba_rms_norm": True, "mamba_norm_before_gate": True},
     "'mamba_norm_before_gate' is True; mixboard's falcon_h1 serves False with mamba_rms_norm"),
    ("falcon_h1", {"hidden_act": "gelu"}, "'hidden_act' is 'gelu'; mixboard's falcon_h1 serves 'silu'"),
    ("falcon_h1", {"ssm_multipliers": [1.0, 1.0]}, "'ssm_multipliers' must be a list of 5 numbers, not [1.0, 1.0]"),
    ("falcon_h1", {"key_multiplier": "big"}, "'key_multiplier' must be a finite number above 0, not 'big'"),
    ("falcon_h1", {"mamba_d_ssm": 100}, "mamba_n_heads (6) x mamba_d_head (16) must equal the inner width (100)"),
    ("nemotron_h", {"n_group": 2, "topk_group": 1},
     "'n_group' is 2; mixboard's nemotron_h serves 1 (routing within groups of experts is not the moe kind's)"),
    ("nemotron_h", {"moe_latent_size": 16}, "'moe_latent_size' is 16; mixboard's nemotron_h serves None"),
    ("nemotron_h", {"num_experts_per_tok": 7}, "top_k must be between 1 and num_experts (6), not 7"),
    ("nemotron_h", {"layers_block_type": DROP, "hybrid_override_pattern": "M*X"},
     "'hybrid_override_pattern' must be a string of M, *, -, E (or give 'layers_block_type'), not 'M*X'"),
    ("nemotron_h", {"layers_block_type": ["mamba"]}, "'layers_block_type' must be a list of 'linear_attention' or"),
    ("nemotron_h", {"mlp_hidden_act": "gelu"}, "'mlp_hidden_act' is 'gelu'; mixboard's nemotron_h serves 'relu2'"),
    ("nemotron_h", {"n_groups": 3}, "'mamba_num_heads' (8) must be a multiple of 'n_groups' (3)"),
    ("granitemoehybrid", {"position_embedding_type": "alibi"},
     "'position_embedding_type' is 'alibi'; mixboard's granitemoehybrid serves 'rope' or 'none'"),
    ("granitemoehybrid", {"layer_types": ["mamba", "mlp", "mamba", "attention"]}, "'layer_types' must be a list of"),
    ("granitemoehybrid", {"num_experts_per_tok": 9}, "top_k must be between 1 and num_experts (6), not 9"),
    ("granitemoehybrid", {"attention_multiplier": 0}, "'attention_multiplier' must be a finite number above 0"),
    ("jamba", {"attn_layer_offset": 3}, "'attn_layer_offset' (3) must be below 'attn_layer_period' (3)"),
    ("jamba", {"expert_layer_period": 0}, "'expert_layer_period'"),
    ("jamba", {"hidden_act": "gelu"}, "'hidden_act' is 'gelu'; mixboard's jamba serves 'silu'"),
    ("jamba", {"num_experts_per_tok": 5}, "top_k must be between 1 and num_experts (4), not 5"),
]


@pytest.mark.parametrize("command", ["run", "explain"])
@pytest.mark.parametrize("model_type, edit, message", CASES, ids=lambda v: str(v)[:40] if isinstance(v, dict) else None)
def test_bad_config_value_is_one_line(configs, tmp_path, capsys, command, model_type, edit, message):
    directory = write_config(tmp_path / "model", configs[model_type], edit)
    status, err = mixboard_here(capsys, command, directory, *(RUN if command == "run" else ()))
    assert_one_line_error(status, err, "config.json", edit)
    assert message in err, (edit, err)


@pytest.mark.parametrize("command", ["run", "explain"])
def test_huge_layer_count_fails_at_once(configs, tmp_path, capsys, command):
    directory = write_config(tmp_path / "model", configs["llama"], {"num_hidden_layers": 10 ** 9})
    started = time.perf_counter()
    status, err = mixboard_here(capsys, command, directory, *(RUN if command == "run" else ()))
    assert time.perf_counter() - started < 0.5
    assert_one_line_error(status, err, "'num_hidden_layers' must be an integer from 1 to 1024, not 1000000000")


def test_the_bounds_themselves_are_accepted():
    reader = ConfigReader({"num_hidden_layers": MAX_LAYERS, "vocab_size": MAX_SIZE}, "llama")
    assert reader.layers() == MAX_LAYERS and reader.size("vocab_size") == MAX_SIZE
    with pytest.raises(ModelError, match="from 1 to 1024, not 1025"):
        ConfigReader({"num_hidden_layers": MAX_LAYERS + 1}, "llama").layers()
    with pytest.raises(ModelError, match="from 1 to 16777216, not 16777217"):
        ConfigReader({"vocab_size": MAX_SIZE + 1}, "llama").size("vocab_size")


def test_released_rope_and_eos_forms_are_read():
    # a transformers 4 config: top-level theta and llama3 scaling, and a list of eos ids
    reader = ConfigReader({"rope_theta": 500000.0, "eos_token_id": [128001, 128008], "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}}, "llama")
    theta, scaling, rotary_dim = reader.rope(128)
    assert theta == 500000.0 and scaling["rope_type"] == "llama3" and rotary_dim == 128
    assert reader.eos_ids() == (128001, 128008)
    # transformers 5: rope_parameters wins over a leftover top-level theta; partial rotary
    reader = ConfigReader({"rope_theta": 1.0, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default",
                                                                  "partial_rotary_factor": 0.5}}, "bamba")
    assert reader.rope(64) == (10000.0, None, 32)


def test_unreadable_config_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "config.json").mkdir()  # a directory where the file belongs
    status, err = mixboard_here(capsys, "explain", tmp_path)
    assert_one_line_error(status, err, f"cannot read {tmp_path / 'config.json'}: Is a directory")

    (tmp_path / "config.json").rmdir()
    (tmp_path / "config.json").write_text("{}")

    def denied(self):  # the tests run as root here, where chmod cannot take read access away
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)
    status, err = mixboard_here(capsys, "run", tmp_path, *RUN)
    assert_one_line_error(status, err, "config.json: Permission denied")


@pytest.mark.parametrize("text", [b"\xff\xfe{", b"[" * 100_000, b"{\"model_type\": \"llama\",}", b"[1, 2]"])
def test_config_that_is_not_a_json_object_is_one_line(tmp_path, capsys, text):
    (tmp_path / "config.json").write_bytes(text)
    status, err = mixboard_here(capsys, "explain", tmp_path)
    assert_one_line_error(status, err, "config.json")


@pytest.mark.parametrize("content", ['{"model": {', '{"version": "1.0", "model": {"type": "Nonesuch"}}', ""])
def test_broken_tokenizer_is_one_line(llama_dir, tmp_path, capsys, content):
    directory = tmp_path / "model"
    directory.mkdir()
    for name in ("config.json", "model.safetensors"):
        (directory / name).symlink_to(llama_dir / name)
    (directory / "tokenizer.json").write_text(content)
    status, err = mixboard_here(capsys, "run", directory, *RUN)
    assert_one_line_error(status, err, f"{directory / 'tokenizer.json'} cannot be loaded by the tokenizers library: ")
