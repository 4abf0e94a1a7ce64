"""Shared fixtures: tiny random checkpoints in a throwaway models folder, the real offline
weights when prepared, and the shared speech clips when present."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_SPEECH = ROOT.parent / "shared" / "data" / "speech"
sys.path.insert(0, str(Path(__file__).parent))

# Never reach for the Hub from tests; local folders only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# gradio's file cache is shared by every gradio process on the machine (/tmp/gradio), and a
# closing app deletes its files there, an example's copy included, under another app still
# using it: each test session gets its own. Set before gradio is imported, which reads it then.
if "GRADIO_TEMP_DIR" not in os.environ:
    os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix="specwhisper-gradio-")
    atexit.register(shutil.rmtree, os.environ["GRADIO_TEMP_DIR"], ignore_errors=True)
warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated.*")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # per-step length notices in assisted mode


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models folder with tiny random checkpoints: two seq2seq mains/assistants of the same
    shape and seed-different weights, and a decoder-only assistant of the same width."""
    import tiny

    root = tmp_path_factory.mktemp("models")
    tiny.save_tiny_checkpoint(root / "tiny-random-a", seed=0)
    tiny.save_tiny_checkpoint(root / "tiny-random-b", seed=1)
    tiny.save_tiny_decoder_only(root / "tiny-random-decoder", seed=2)
    return root


@pytest.fixture
def use_models(monkeypatch: pytest.MonkeyPatch):
    """Point SPECWHISPER_MODELS at a folder for one test."""

    def use(folder: Path) -> Path:
        monkeypatch.setenv("SPECWHISPER_MODELS", str(folder))
        return folder

    return use


@pytest.fixture(scope="session")
def real_models() -> Path:
    """The converted offline checkpoints (python -m specwhisper.offline), or skip."""
    root = Path(os.environ.get("SPECWHISPER_MODELS", ROOT / "models")).resolve()
    if not (root / "whisper-tiny.en" / "model.safetensors").is_file():
        pytest.skip("offline weights not prepared (run python -m specwhisper.offline)")
    return root


@pytest.fixture(scope="session")
def shared_speech() -> Path:
    if not (SHARED_SPEECH / "manifest.tsv").is_file():
        pytest.skip("../shared/data/speech is absent")
    return SHARED_SPEECH


@pytest.fixture(scope="session")
def app_models(tiny_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models folder for the app and API tests, where a whole comparison takes seconds.

    The tiny checkpoints are copied with their output capped at 8 tokens and timestamp tokens
    suppressed (a random model emits them, and Whisper then re-decodes the window from each).
    Three folders exist only to be refused before anything loads: `tiny-english` says it has
    the English-only vocabulary, `tiny-other-vocab` the v2 multilingual one (so it cannot assist
    the tiny mains), and `tiny-config-only` has a config.json and nothing else.
    """
    import json
    import shutil

    import tiny

    n_timestamps = len(tiny.TIMESTAMPS)  # the tiny vocabulary ends with the timestamp tokens
    root = tmp_path_factory.mktemp("app-models")
    for name in ("tiny-random-a", "tiny-random-b", "tiny-random-decoder"):
        shutil.copytree(tiny_models / name, root / name)
        path = root / name / "generation_config.json"
        config = json.loads(path.read_text())
        vocab_size = json.loads((root / name / "config.json").read_text())["vocab_size"]
        config["max_length"] = 8
        config["suppress_tokens"] += list(range(vocab_size - n_timestamps, vocab_size))
        path.write_text(json.dumps(config))
    for name, vocab_size in (("tiny-english", 51864), ("tiny-other-vocab", 51865)):
        shutil.copytree(tiny_models / "tiny-random-b", root / name)
        path = root / name / "config.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | {"vocab_size": vocab_size}))
    (root / "tiny-config-only").mkdir()
    shutil.copy(tiny_models / "tiny-random-a" / "config.json", root / "tiny-config-only")
    return root


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy shared CPU they lose a lot
    to them (several times slower); the module runs single-threaded, then the count returns."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium driven by Playwright, for the browser tests (they skip without it)."""
    from playwright.sync_api import sync_playwright
    from test_browser import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@contextlib.contextmanager
def served(demo: Any, **options: Any) -> Iterator[str]:
    """`demo` launched on a free localhost port (gradio launch options as given); its URL,
    ending in "/". Closed on exit."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **options
    )
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


# A visitor's client in a process of its own: it submits one comparison (the audio, then the
# other arguments as JSON) and waits for the result.
VISITOR = """
import json, sys, time
from gradio_client import Client, handle_file
client = Client(sys.argv[1], verbose=False)
client.submit(handle_file(sys.argv[2]), api_name="/compare", **json.loads(sys.argv[3]))
time.sleep(600)
"""

T = TypeVar("T")


def visitor_leaves(
    url: str, audio: Path, settings: dict[str, Any], under_way: Callable[[], T]
) -> tuple[T, float]:
    """A visitor submits a comparison from its own process, which is killed once `under_way()`
    returns (the run is computing): the operating system then closes its connections, as a
    browser's are when its tab closes. Returns what `under_way` returned and when the visitor
    was gone (time.perf_counter)."""
    visitor = subprocess.Popen(
        [sys.executable, "-c", VISITOR, url, str(audio), json.dumps(settings)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        waited = under_way()
    finally:
        gone_at = time.perf_counter()
        visitor.send_signal(signal.SIGKILL)
        visitor.wait()
    return waited, gone_at


@pytest.fixture(scope="module")
def loaded(tiny_models: Path) -> tuple[Any, dict[str, Any]]:
    """The tiny main and every kind of assistant for it (tiny.ASSISTANTS), loaded on the CPU
    in fp32: (main, {assistant name: loaded})."""
    import torch
    from tiny import ASSISTANTS

    from specwhisper import checkpoints, drafters, loading

    cache = loading.ModelCache(capacity=8)
    cpu, fp32 = torch.device("cpu"), torch.float32

    def load(name: str) -> Any:
        return cache.get(checkpoints._local_checkpoint(tiny_models / name), cpu, fp32)

    main = load("tiny-random-a")
    drafts = {name: load(name) for name in ASSISTANTS if name != checkpoints.SELF_INT8}
    drafts[checkpoints.SELF_INT8] = drafters.self_int8(main, cache)
    return main, drafts
