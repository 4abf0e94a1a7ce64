"""Every script BENCHMARKS runs, and every rejected lever's measuring script, imports against
the package as it is: a renamed or removed helper breaks the suite, not a reader who runs it.
Importing runs nothing (each script's work is under `if __name__ == "__main__"`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*ROOT.glob("scripts/*.py"), *ROOT.glob("docs/rejected/*/*.py")])


def test_scripts_are_found():
    assert len(SCRIPTS) > 10


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_script_imports(path: Path, monkeypatch: pytest.MonkeyPatch):
    # a prototype sits beside its script and is imported by name from that folder
    monkeypatch.syspath_prepend(str(path.parent))
    name = f"script_{path.parent.name}_{path.stem}".replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    assert module.__name__ != "__main__"
