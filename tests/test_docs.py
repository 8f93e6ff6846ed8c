"""docs/plugins.md is followed literally: its files are written, installed as
a real wheel, and listed by the CLI as the page says."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).parent.parent / "docs" / "plugins.md"


def doc_files() -> dict[str, str]:
    text = DOC.read_text()
    return dict(re.findall(r"File `([^`]+)`:\n\n```[a-z]*\n(.*?)```", text, flags=re.S))


def test_vendor_quickstart_from_an_empty_folder(tmp_path):
    files = doc_files()
    assert set(files) == {"acme-mixboard/pyproject.toml", "acme-mixboard/acme_mixboard/plugin.py",
                          "acme-mixboard/acme_mixboard/attention.py"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(tmp_path / "acme-mixboard")], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXBOARD_")}
    env.update(PYTHONPATH=str(target), MIXBOARD_PLUGINS="acme")

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "mixboard_runner", *args], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    (plugin,) = [p for p in cli("plugins", "--json") if p["status"] != "disabled"]  # first-party ones are disabled
    assert plugin == {"name": "acme", "distribution": "acme-mixboard", "version": "0.1.0", "status": "ok",
                      "error": None, "backends": ["acme_attn"]}
    (backend,) = cli("backends", "--kind", "attention", "--device", "cpu", "--json")
    assert backend["reasons"] == ["runs on cuda; this environment is cpu",
                                  "needs Python module 'acme_kernels', which is not installed (pip install acme-kernels)"]
    (backend,) = cli("backends", "--kind", "attention", "--capability", "8.0", "--json")
    assert "needs compute capability 9.0 or newer; this GPU has 8.0" in backend["reasons"]
