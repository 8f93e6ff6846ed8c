"""`mixboard run` and `mixboard explain` through a subprocess: JSON
contracts, the demo default, and one clear line for every bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from safetensors.torch import load_file, save_file



def mixboard(*args, env=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "mixboard_runner", *args], capture_output=True, text=True,
                          env=environ)


def test_run_demo_by_default_json_contract():
    out = mixboard("run", "--max-tokens", "4", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {"plan", "outputs", "stats"}
    kinds = {layer["kind"] for layer in data["plan"]["layers"]}
    assert kinds == {"attention", "mamba1", "mamba2", "short_conv", "linear", "rms_norm", "rotary", "embedding",
                     "argmax"}
    from mixboard_mamba1.cpu_backend import kernel_unusable as mamba1_kernel_unusable
    from mixboard_mamba2.cpu_backend import kernel_unusable as mamba2_kernel_unusable
    from mixboard_sdpa.cpu_backend import kernel_unusable as sdpa_kernel_unusable
    from mixboard_shortconv.cpu_backend import kernel_unusable as short_conv_kernel_unusable
    # the C backends win on CPU where their kernels are built
    attention = "sdpa" if sdpa_kernel_unusable() else "sdpa_cpu"
    mamba1 = "mamba1_torch" if mamba1_kernel_unusable() else "mamba1_cpu"
    mamba2 = "mamba2_torch" if mamba2_kernel_unusable() else "mamba2_cpu"
    short_conv = "short_conv_torch" if short_conv_kernel_unusable() else "short_conv_cpu"
    backends = {g["kind"]: g["backend"] for g in data["plan"]["groups"]}
    assert {backends[k] for k in ("attention", "mamba1", "mamba2", "short_conv")} == {attention, mamba1, mamba2,
                                                                                      short_conv}
    (output,) = data["outputs"]
    assert len(output["output_ids"]) == 4 and isinstance(output["text"], str)
    assert {"prefill_tokens", "decode_tokens", "prefill_tokens_per_s", "decode_tokens_per_s", "wall_s"} <= set(data["stats"])
    # the products are the plan's too, with their reasons: mixboard-cpu's on CPU in float32
    assert backends["linear"] in ("linear_cpu", "linear_onednn")
    assert data["stats"]["projections"] == backends["linear"]
    (products,) = [c for c in data["plan"]["choices"] if c["kind"] == "linear"]
    assert "linear_torch" in products["rejected"] and len(products["layers"]) == 32
    named = [name for c in data["plan"]["choices"] for name in c["layers"]]
    assert sorted(named) == sorted(layer["name"] for layer in data["plan"]["layers"])


def test_run_text_output_and_forced_backend(llama_dir):
    out = mixboard("run", str(llama_dir), "--prompt-ids", "1,2,3", "--prompt-ids", "4,5", "--max-tokens", "3",
                   "--backend", "attention=sdpa")
    assert out.returncode == 0, out.stderr
    assert "sdpa" in out.stdout and "[1] 2 prompt tokens -> 3 new" in out.stdout and "decode" in out.stdout


def test_explain_json_contract_without_weights(tmp_path, llama_dir):
    # explain never reads weights: a directory with only config.json is enough
    (tmp_path / "config.json").write_text((llama_dir / "config.json").read_text())
    out = mixboard("explain", str(tmp_path), "--device", "cuda", "--capability", "9.0", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {"fingerprint", "mixer_fingerprint", "environment", "layers", "groups", "choices", "options"}
    assert data["options"] == {"sdpa": {"decode_chunk_mib": 64}}  # the backends it runs that declare options
    layer = [layer for layer in data["layers"] if layer["kind"] == "attention"][0]
    assert layer["name"] == "model.layers.0.self_attn"
    assert layer["backend"] == "sdpa"  # float32: flash_attn is rejected, with its reasons
    assert any("float32" in r for r in layer["rejected"]["flash_attn"])
    (choice,) = [c for c in data["choices"] if c["kind"] == "attention"]
    assert choice["layers"] == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    assert any("float32" in r for r in choice["rejected"]["flash_attn"])
    attention = [g for g in data["groups"] if g["kind"] == "attention"]
    assert attention == [{"backend": "sdpa", "kind": "attention", "layers": [
        "model.layers.0.self_attn", "model.layers.1.self_attn"], "state": attention[0]["state"]}]
    # on a simulated GPU the dense ops fall to the portable backends, each with its reasons
    assert {g["backend"] for g in data["groups"] if g["kind"] != "attention"} == {
        "linear_torch", "rms_norm_torch", "rotary_torch", "embedding_torch", "argmax_torch"}


def _bad_dirs(tmp_path, llama_dir):
    def copy(name, drop=None, edit=None, config=None):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(config if config is not None else (llama_dir / "config.json").read_text())
        state = load_file(str(llama_dir / "model.safetensors"))
        if drop:
            del state[drop]
        if edit:
            state[edit] = state[edit][:, :-1].contiguous()
        save_file(state, str(d / "model.safetensors"))
        return d

    pickle_dir = tmp_path / "pickle"
    pickle_dir.mkdir()
    (pickle_dir / "config.json").write_text((llama_dir / "config.json").read_text())
    (pickle_dir / "pytorch_model.bin").write_bytes(b"not really")
    truncated = copy("truncated")
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    return {
        "missing config": (tmp_path / "nothing", "is not a directory"),
        "truncated weights": (truncated, "or lie past the end of the file"),
        "malformed config": (copy("malformed", config="{not json"), "is not valid JSON"),
        "unsupported type": (copy("gpt2", config='{"model_type": "gpt2"}'),
                             "model_type 'gpt2' is not supported; supported: bamba, falcon_h1, granitemoehybrid, "
                             "jamba, lfm2, llama, mamba, mamba2, nemotron_h, qwen3_next"),
        "missing tensor": (copy("missing", drop="model.layers.1.mlp.up_proj.weight"),
                           "missing 1 tensor(s), first: model.layers.1.mlp.up_proj.weight"),
        "wrong shape": (copy("shape", edit="model.layers.0.self_attn.q_proj.weight"),
                        "tensor model.layers.0.self_attn.q_proj.weight has shape [64, 63], the config implies [64, 64]"),
        "pickle": (pickle_dir, "pickle checkpoints (pytorch_model.bin), which mixboard refuses"),
    }


def test_bad_models_get_one_line_and_exit_2(tmp_path, llama_dir):
    for case, (directory, message) in _bad_dirs(tmp_path, llama_dir).items():
        out = mixboard("run", str(directory), "--prompt-ids", "1,2")
        assert out.returncode == 2, (case, out.stderr)
        assert message in out.stderr, (case, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, (case, out.stderr)


@pytest.mark.parametrize("args, message", [
    (["--prompt-ids", ",".join(["1"] * 600)], "longer than this model and cache allow (512 tokens"),
    (["--prompt-ids", "1,x"], "bad --prompt-ids"),
    (["--prompt-ids", "1,999"], "token id 999 is outside the vocabulary (0..159)"),
    (["--prompt", "hello"], "no tokenizer.json"),
    (["--prompt-ids", "1", "--device", "tpu9"], "unknown device 'tpu9'"),
    (["--prompt-ids", "1", "--device", "cuda"], "not available here"),
    (["--prompt-ids", "1", "--top-k", "5"], "only apply when sampling: add --temperature > 0"),
    (["--prompt-ids", "1", "--temperature", "-1"], "temperature must be a finite number >= 0.0, not -1.0"),
    (["--prompt-ids", "1", "--cache-memory", "lots"], "bad size 'lots'"),
    (["--prompt-ids", "1", "--cache-memory", "1KiB"], "cannot hold one sequence"),
    (["--prompt-ids", "1", "--backend", "attention=nope"], "unknown backend 'nope'"),
    (["--prompt-ids", "1", "--temperature", "nan"], "temperature must be a finite number >= 0.0, not nan"),
    (["--prompt-ids", "1", "--temperature", "1", "--seed", str(2**64)], "seed must be an integer from 0 to"),
    (["--prompt-ids", "1", "--max-tokens", "0"], "max_tokens must be an integer >= 1, not 0"),
    (["--prompt-ids", "1", "--cache-memory", "100000GiB"], "is more than this machine has"),
    # strict means strict: a rule that picks nothing is an error saying what it could have meant
    (["--prompt-ids", "1", "--backend", "model.layers.7.*=sdpa"], "matches no layer of this model"),
    (["--prompt-ids", "1", "--backend", "model.layer.1.*=sdpa"], "did you mean 'model.layers.1.self_attn'?"),
    (["--prompt-ids", "1", "--backend", "model.layers.9.*=sdpx"], "names unknown backend 'sdpx'; did you mean 'sdpa'?"),
    (["--prompt-ids", "1", "--backend", "mamba2=mamba2_torch"], "this model has no mamba2 layers"),
])
def test_bad_run_input_gets_one_line_and_exit_2(llama_dir, args, message):
    out = mixboard("run", str(llama_dir), *args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_run_and_explain_have_help():
    for command in ("run", "explain"):
        out = mixboard(command, "--help")
        assert out.returncode == 0 and "usage: mixboard" in out.stdout


def test_a_prompt_that_is_not_utf8_gets_one_line():
    out = subprocess.run([sys.executable, "-m", "mixboard_runner", "run", "--prompt", b"caf\xe9".decode(errors="surrogateescape")],
                         capture_output=True)
    assert out.returncode == 2 and out.stderr.decode().splitlines() == [
        "mixboard run: error: a prompt is not valid UTF-8 text: b'caf\\xe9'"]


def _on_a_terminal(args, until=None, timeout=60):
    """Run ``mixboard`` with a pseudo-terminal as stdout; with ``until``, send
    Ctrl-C's SIGINT once 8 bytes followed that text. Returns (status, stdout, stderr)."""
    import pty
    import select
    import signal
    import time

    main, child = pty.openpty()
    # A shell without job control starts background jobs with SIGINT ignored, and the child would
    # inherit that (Python then installs no KeyboardInterrupt handler): give it a terminal's default.
    proc = subprocess.Popen([sys.executable, "-m", "mixboard_runner", *args], stdout=child, stderr=subprocess.PIPE,
                            env={k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(child)
    shown, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([main], [], [], 0.1)[0]:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the child closed the terminal
                break
            shown += chunk
            if until is not None and until in shown and len(shown.split(until, 1)[1]) >= 8:  # tokens came
                proc.send_signal(signal.SIGINT)
                until = None
        elif proc.poll() is not None:
            break
    proc.wait(timeout=timeout)
    os.close(main)
    return proc.returncode, shown.decode(errors="replace").replace("\r\n", "\n"), proc.stderr.read().decode()


def test_run_on_a_terminal_streams_the_same_outputs():
    args = ["run", "--prompt-ids", "72,105", "--prompt-ids", "1,2,3", "--max-tokens", "12", "--ignore-eos"]
    expected = json.loads(mixboard(*args, "--json").stdout)["outputs"]
    status, shown, err = _on_a_terminal(args)
    assert status == 0, err
    streamed = shown.split("\n[0]\n", 1)[1]
    first, second = streamed.split("\n(length)\n\n[1]\n")
    assert first == expected[0]["text"] and second.split("\n(length)\n")[0] == expected[1]["text"]


def test_ctrl_c_prints_one_line_and_exits_130():
    # the signal comes once tokens are being printed: it lands in the middle of generation
    # a loaded machine may take a minute to start: the deadline is for the tokens, not a speed test
    status, shown, err = _on_a_terminal(["run", "--max-tokens", "100000", "--ignore-eos"], until=b"[0]\r\n",
                                        timeout=300)
    assert "[0]" in shown, f"no tokens within 300 s: {shown!r}"
    assert status == 130 and err.strip() == "mixboard run: interrupted", (status, err)


def test_a_layer_pattern_forces_its_backends_kind_only():
    # block 0 of the demo holds attention, its norms and its projections: the rule picks the attention alone
    out = mixboard("explain", "--backend", "model.layers.0.*=sdpa", "--json")
    assert out.returncode == 0, out.stderr
    layers = {layer["name"]: layer for layer in json.loads(out.stdout)["layers"]}
    assert layers["model.layers.0.self_attn"]["backend"] == "sdpa"
    assert layers["model.layers.0.self_attn"]["rule"] == "model.layers.0.*=sdpa"
    assert layers["model.layers.0.input_layernorm"]["rule"] is None
    assert layers["model.layers.4.self_attn"]["backend"] != "sdpa"
    # a pattern over another kind's layers only says so, in one line
    out = mixboard("explain", "--backend", "model.layers.1.*=sdpa")
    assert out.returncode == 2
    assert "matches no attention layer: 'sdpa' serves attention, and the layers it names are of kind" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
