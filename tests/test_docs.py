"""docs/plugins.md is followed literally: its files are written, installed as
a real wheel, and listed by the CLI as the page says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from distfactory import install_doc_project

DOC = Path(__file__).parent.parent / "docs" / "plugins.md"


def test_vendor_quickstart_from_an_empty_folder(tmp_path):
    files, target = install_doc_project(DOC, tmp_path, "acme-mixboard")
    assert files == {"acme-mixboard/pyproject.toml", "acme-mixboard/acme_mixboard/plugin.py",
                     "acme-mixboard/acme_mixboard/attention.py"}
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
