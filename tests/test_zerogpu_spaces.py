"""The page on ZeroGPU, in a server process patched by the installed `spaces` package itself.

tests/zerogpu_server.py runs the app's server process with SPACES_ZERO_GPU set (see its
docstring for what this CPU build of torch is given so that spaces 0.51 imports, and for which
parts of spaces cannot run without a GPU). This file checks, from its report:
spaces' facts the page is built on; that the server process loads only the preloaded pair, while
another pair, another precision and batch mode load and run inside the forked device call; and
that a failure inside that call reaches the API and the page as the project's sentence.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specwhisper.ui.errors import GENERIC_ERROR

ROOT = Path(__file__).resolve().parents[1]
SPANISH = ROOT / "examples" / "es_asterisk_priv-introsaved.wav"
SERVER_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def report(app_models: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    models_dir = tmp_path_factory.mktemp("zerogpu-models")
    for name in ("tiny-random-a", "tiny-random-b", "tiny-random-decoder"):
        (models_dir / name).symlink_to(app_models / name, target_is_directory=True)
    broken = models_dir / "tiny-unreadable"  # it resolves; its weights fail to load
    shutil.copytree(app_models / "tiny-random-a", broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    out = models_dir.parent / "zerogpu-report.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "zerogpu_server.py"), str(models_dir), str(SPANISH)]
        + [str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SERVER_TIMEOUT_S,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_spaces_patches_the_server_process_as_the_page_assumes(report):
    # zero/torch/patching.py, patch(): _cuda_init raises, CUDA is said to be there ...
    assert report["cuda_init_is_spaces"] and report["cuda_available"]
    # ... and the .to("cuda") emulation is a TorchFunctionMode on the importing thread only
    assert report["mode_on_importing_thread"] and not report["mode_on_other_thread"]
    assert report["decorated"] == [True, True]  # spaces.GPU wrapped both device calls


def test_only_the_preloaded_pair_loads_in_the_server_process(report):
    # the default pair, preloaded on the importing thread, is recorded for the workers
    assert report["preloaded_on"] == "cuda:0" and report["preloaded_recorded"]
    # a handler's thread that loads meets spaces' raising _cuda_init: so it never does
    assert report["load_in_handler_thread"]["error"] == "CheckpointError"
    assert "Low-level CUDA init" in report["load_in_handler_thread"]["message"]
    assert report["gpu_seconds"] > 0  # the duration is worked out without loading
    assert report["server_loaded_s"] == 0


def test_another_pair_precision_and_batch_mode_load_inside_the_device_call(report):
    for run in (report["other_pair"], report["other_precision"]):
        assert run["identical"] is True
        assert run["load_time_s"] > 0  # loaded in the forked call, on what it found there
        assert run["device"].startswith("cpu")  # after spaces' unpatch, this CPU
    assert report["batch"] == {"ok": True}


def test_a_failure_inside_the_device_call_reaches_the_visitor_as_a_sentence(report):
    # what spaces shows for any exception that is not a gr.Error: its class name
    assert report["plain_error_as_spaces_shows_it"] == "CompareError"
    failure = report["failure_api"]
    assert failure["error"] == "gr.Error"
    assert failure["message"].startswith("Could not load the folder 'tiny-unreadable (local)'")
    assert "/" not in failure["message"] and failure["message"] != GENERIC_ERROR
    assert html.escape(failure["message"]) in report["failure_page_verdict"]
