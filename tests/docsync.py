"""The docs quote docstrings; this keeps each quote equal to its source.

A quote in ``docs/*.md`` is a comment naming an object, then a text block:

    <!-- help: mixboard.kinds.AttentionImpl -->
    ```text
    (the object's docstring, as inspect.getdoc gives it)
    ```

``tests/test_docs_contract.py`` fails when a quote differs from its
docstring. After editing a docstring, rewrite the quotes with

    python tests/docsync.py
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
QUOTE = re.compile(r"(<!-- help: (?P<name>[\w.]+) -->\n```text\n)(?P<body>.*?)(```)", re.S)


def resolve(dotted: str):
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def docstring(dotted: str) -> str:
    return inspect.getdoc(resolve(dotted)) + "\n"


def quotes(text: str) -> list[tuple[str, str]]:
    """(name, quoted text) for every quote of a page."""
    return [(m["name"], m["body"]) for m in QUOTE.finditer(text)]


def rewrite(text: str) -> str:
    return QUOTE.sub(lambda m: m.group(1) + docstring(m["name"]) + m.group(4), text)


if __name__ == "__main__":
    for page in sorted(DOCS.glob("*.md")):
        old = page.read_text()
        new = rewrite(old)
        if new != old:
            page.write_text(new)
            print(f"rewrote the quotes of {page}", file=sys.stderr)
