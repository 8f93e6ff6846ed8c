"""Source text of plugin modules used by the tests' distributions."""

HEADER = """
from mixboard import Backend, hookimpl
"""


def backend_class(cls_name: str, name: str, kind: str = "attention", priority: int = 0,
                  devices=("*",), dtypes=("float32",), requires=(), api_version: int = 1,
                  extra: str = "") -> str:
    return f"""
class {cls_name}(Backend):
    name = {name!r}
    kind = {kind!r}
    priority = {priority}
    devices = {tuple(devices)!r}
    dtypes = {tuple(dtypes)!r}
    requires = {tuple(requires)!r}
    api_version = {api_version}
{extra}
"""


def plugin(*classes: str, returns: str | None = None) -> str:
    """A plugin module whose mixboard_backends returns the given classes."""
    body = "\n".join(classes)
    names = returns if returns is not None else "[" + ", ".join(
        line.split("(")[0].split()[1] for c in classes for line in c.splitlines() if line.startswith("class ")
    ) + "]"
    return HEADER + body + f"""

@hookimpl
def mixboard_backends():
    return {names}
"""
