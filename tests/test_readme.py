from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_ci_runs_exactly_the_readme_test_command():
    readme_lines = (ROOT / "README.md").read_text().splitlines()
    test_command = next(line for line in readme_lines if "pytest" in line and line.startswith("python3 -m venv"))
    ci_lines = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l and not l.startswith(("#", "set ", "cd "))]
    assert ci_lines == [test_command]
