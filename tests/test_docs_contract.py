"""docs/kinds.md is the forward contract a vendor implements from, and
``help()`` shows the same text: every box on the page is a docstring, kept
equal to it (``python tests/docsync.py`` rewrites them), every field and
argument is documented, and the worked example prints what the page says."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import re
from pathlib import Path

import pytest

import mixboard
from docsync import DOCS, docstring, quotes

KINDS_PAGE = DOCS / "kinds.md"


def _all_quotes():
    return [(page.name, name, body) for page in sorted(DOCS.glob("*.md")) for name, body in quotes(page.read_text())]


@pytest.mark.parametrize("page, name, body", _all_quotes(), ids=lambda v: v if isinstance(v, str) and "\n" not in v else "")
def test_a_quoted_docstring_is_the_docstring(page, name, body):
    assert body == docstring(name), f"docs/{page} quotes {name} as it was: run `python tests/docsync.py`"


def test_the_page_quotes_every_built_in_kind():
    quoted = {name for name, _ in quotes(KINDS_PAGE.read_text())}
    assert {"mixboard.CommonBatchMetadata", "mixboard.kinds.MixerImpl", "mixboard.state"} <= quoted
    for kind in mixboard.kinds.BUILTIN_KINDS:
        assert f"mixboard.{kind.impl.__name__}" in quoted, kind.name
        assert f"mixboard.{kind.spec.__name__}" in quoted, kind.name


def test_help_of_the_metadata_documents_every_field():
    doc = inspect.getdoc(mixboard.CommonBatchMetadata)
    for field in dataclasses.fields(mixboard.CommonBatchMetadata):
        assert re.search(rf"\b{field.name}\b[^\n]*:", doc) or f"{field.name}," in doc, field.name
    for name in ("num_prefills", "num_decode_tokens", "sequence_rows"):
        assert name in doc


def test_help_of_each_impl_documents_every_argument_of_forward():
    for kind in mixboard.kinds.BUILTIN_KINDS:
        doc = inspect.getdoc(kind.impl)
        params = [p for p in inspect.signature(kind.impl.forward).parameters if p != "self"]
        assert doc.splitlines()[0].endswith(f"``forward({', '.join(params)})``."), kind.name
        for param in params:
            assert re.search(rf"^(\w+, )*{param}\b[^\n]*:", doc, re.M), (kind.name, param)
        weights = getattr(mixboard, kind.impl.__name__.replace("Impl", "Weights"), None)
        if weights is not None:  # every weight, with its shape
            for field in weights.__slots__:
                assert re.search(rf"\b{field}\s+\[", doc), (kind.name, field)


def test_the_worked_example_prints_what_the_page_says():
    text = KINDS_PAGE.read_text()
    code, printed = re.search(r"### A step, field by field.*?```python\n(.*?)```\n\nprints\n\n```text\n(.*?)```",
                              text, re.S).groups()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/kinds.md", "exec"), {})
    assert out.getvalue() == printed
