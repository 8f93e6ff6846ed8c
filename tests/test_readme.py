from pathlib import Path

ROOT = Path(__file__).parent.parent
LANES = " && bash integrations/vllm/ci.sh && bash tests/triton_interp/ci.sh"


def readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    return [line for line in lines if "pytest" in line and line.startswith("python3 -m venv")]


def test_the_readme_test_command_runs_the_main_suite_and_the_next_line_adds_the_lanes():
    main_suite, full = readme_commands()
    assert main_suite.endswith("python -m pytest") and "ci.sh" not in main_suite
    assert full == main_suite + LANES


def test_ci_runs_exactly_the_readme_full_command():
    full = readme_commands()[1]
    ci_lines = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l and not l.startswith(("#", "set ", "cd "))]
    assert ci_lines == [full]
