"""The engine, cache manager and scheduler never name a kind and never test
a layer's type: everything kind-specific arrives through the plan."""

import ast
import re
from pathlib import Path

import pytest

RUNNER = Path(__file__).parents[2] / "runner" / "mixboard_runner"
FORBIDDEN = re.compile(r"attention|mamba|short_?conv|\bconv|ssm|k_cache|v_cache|\bkv\b|\brope\b|rotary", re.I)


@pytest.mark.parametrize("module", ["engine.py", "cache.py", "scheduler.py"])
def test_module_names_no_kind_and_tests_no_type(module):
    source = (RUNNER / module).read_text()
    hits = [line.strip() for line in source.splitlines() if FORBIDDEN.search(line)]
    assert hits == [], f"{module} names a kind: {hits}"
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "type", "issubclass"):
            pytest.fail(f"{module}:{node.lineno} tests a type")
        if isinstance(node, ast.ImportFrom) and node.module and ("models" in node.module.split(".")):
            pytest.fail(f"{module}:{node.lineno} imports model internals ({node.module})")


MODELS = RUNNER / "models"
# a device or dtype test that picks a code path: what the plan's backends decide, never the model code
PATH_PICKING = re.compile(r"\.device\b|device\.type|\bdtype\s*([!=]=|in\b|not in\b)|[!=]=\s*torch\.\w*(float|half)|"
                          r"is_cuda|torch\.cuda|is_floating_point|\bserves\(|\bisa\(|\bkernels\b|\bpanels\b|mkldnn|onednn",
                          re.I)


@pytest.mark.parametrize("module", sorted(p.name for p in MODELS.glob("*.py")))
def test_model_code_picks_no_code_path_by_device_or_dtype(module):
    source = (MODELS / module).read_text()
    code = [line.split("#")[0] for line in source.splitlines()]
    hits = [line.strip() for line in code if PATH_PICKING.search(line)]
    assert hits == [], f"models/{module} picks a code path by device or dtype: {hits}"


def test_the_path_picking_check_can_fail():
    for line in ("if x.device.type == 'cpu':", "if x.dtype == torch.float32:", "if kernels.serves(d, t):",
                 "if torch.cuda.is_available():", "if x.dtype in (torch.bfloat16,):", "if x.is_floating_point():"):
        assert PATH_PICKING.search(line), line
