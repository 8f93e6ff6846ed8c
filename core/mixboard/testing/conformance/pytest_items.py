"""The tests ``pytest --mixboard-backend NAME`` runs: one per case of every
named backend, made from the options (see ``mixboard.testing.pytest_plugin``).
Not collected otherwise: the file name does not match ``test_*.py``."""

from __future__ import annotations

from mixboard.testing.conformance.suites import ConformanceSuite


def _suite(config, name: str) -> type:
    return type(f"Conformance[{name}]", (ConformanceSuite,), {
        "backend": name,
        "device": config.getoption("mixboard_device"),
        "dtypes": tuple(config.getoption("mixboard_dtype")) or None,
        "thorough": config.getoption("mixboard_thorough"),
    })


def pytest_generate_tests(metafunc):
    import pytest

    from mixboard.testing.pytest_plugin import requested_backends

    params = []
    for name in requested_backends(metafunc.config):
        suite = _suite(metafunc.config, name)
        for item in suite.conformance_cases():
            if isinstance(item, tuple):
                case, expected = item
                marks = [pytest.mark.xfail(strict=True, reason=expected)] if expected else []
                params.append(pytest.param(suite, case, id=f"{name}:{case.id}", marks=marks))
            else:
                params.append(pytest.param(suite, item, id=f"{name}:suite"))
    metafunc.parametrize(("suite", "conformance_case"), params)


def test_conformance(suite, conformance_case):
    suite.test_conformance(suite(), conformance_case)
