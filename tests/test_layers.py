"""Dependencies point one way: app.py on top, imported by nothing; the page (specwhisper.ui)
below it, the only part that imports gradio; the engine (the rest of specwhisper) below that.
Each check runs in a fresh interpreter, so what other tests imported does not count."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import specwhisper

ROOT = Path(__file__).resolve().parents[1]
# Imports every module named on the command line, then prints what of gradio, the page and the
# app ended up loaded.
IMPORT_AND_LIST = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(
    m for m in sys.modules
    if m == "app" or m.split(".")[0] == "gradio" or m.startswith("specwhisper.ui")
)))
"""


def loaded_after_importing(*names: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_AND_LIST, *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def submodules(package) -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__, package.__name__ + "."))


def test_the_engine_never_imports_gradio():
    engine = [name for name in submodules(specwhisper) if name != "specwhisper.ui"]
    named = (
        "compare bench batch_mode batch_loop decoding checkpoints hub loading offline audio".split()
    )
    assert {f"specwhisper.{name}" for name in named} <= set(engine)
    assert loaded_after_importing(*engine) == []


def test_nothing_imports_the_app():
    import specwhisper.ui

    loaded = loaded_after_importing(*submodules(specwhisper.ui))
    assert "gradio" in loaded  # the page does import gradio, so the check above can fail
    assert "app" not in loaded
