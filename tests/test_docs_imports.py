"""Every ``from pfd… import`` and ``import pfd`` that README.md and docs/ show runs (issue 52: the docs
imported a class that no longer existed)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_IMPORT = re.compile(r"^\s*(from (pfd[\w.]*) import ([\w, ]+)|import (pfd[\w.]*))\s*(#.*)?$")


def _imports() -> list[tuple[str, str, list[str]]]:
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            m = _IMPORT.match(line)
            if m:
                module = m.group(2) or m.group(4)
                names = [x.strip() for x in (m.group(3) or "").split(",") if x.strip()]
                out.append((f"{doc.relative_to(ROOT)}:{n}", module, names))
    return out


def test_the_docs_show_imports_at_all():
    assert len(_imports()) >= 5  # README and docs/ show pfd from Python


@pytest.mark.parametrize("where, module, names", _imports(), ids=[w for w, _, _ in _imports()])
def test_every_import_the_docs_show_runs(where, module, names):
    mod = importlib.import_module(module)
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{where}: {module} has no {missing}"
