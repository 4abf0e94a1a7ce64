"""faster-whisper in a process of its own, so that a run nobody waits for stops at once.

CTranslate2 decodes a whole 30 s window in one call into its C++ code (its Whisper `generate`
takes no callback, unlike its Generator's `generate_batch`), where no stop flag can be read: in
the server's process a cancelled run would keep the CPU to the window's end (seconds at float32,
more for larger mains). A worker process is ended instead: the parent waits for each answer in
short polls, calls the run's `check` (specwhisper.cancel.check) between them, and kills the
worker when it raises. A killed worker is gone; the next request starts another and loads the
model again.

The worker imports faster-whisper and numpy only (not torch or transformers). The audio crosses
the pipe once per clip, before the timed runs; a timed run sends one word and gets the
transcript back, so a timer around it measures the transcription and one pipe round trip (well
under a millisecond).

On a GPU the model stays in the calling process (`InProcess`), which reads `check` between
windows: a GPU decodes a window in well under a second, and on ZeroGPU the run is already in a
forked worker that holds the device. This module knows nothing of torch, the page or the
comparison.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

POLL_S = 0.05  # how often a waiting parent calls its run's check

Check = Callable[[], None]  # raises (e.g. cancel.Cancelled) when the run must stop


@dataclass(frozen=True)
class Transcript:
    """One faster-whisper transcription."""

    text: str
    token_ids: tuple[int, ...]  # the segments' tokens: no prompt, no end-of-text
    language: str  # as given, or as it detected


@dataclass(frozen=True)
class Weights:
    """A CTranslate2 model: a folder faster-whisper loads as is, or model.bin pieces (with
    config.json, tokenizer.json ... next to the first), joined in memory."""

    label: str  # the name faster-whisper is given for the pieces
    folder: str | None = None
    parts: tuple[str, ...] = ()


class WorkerError(RuntimeError):
    """faster-whisper failed in the worker (its exception's type and message), or the worker
    ended without an answer."""


def model_location(weights: Weights) -> tuple[str, dict[str, bytes] | None]:
    """What WhisperModel takes: a folder path, or a name and the model's files in memory."""
    if weights.folder is not None:
        return weights.folder, None
    # CTranslate2 reads model.bin whole; joined in memory, the pieces are not copied to disk.
    home = Path(weights.parts[0]).parent
    files = {"model.bin": b"".join(Path(p).read_bytes() for p in weights.parts)}
    for name in ("config.json", "tokenizer.json", "preprocessor_config.json"):
        if (home / name).is_file():
            files[name] = (home / name).read_bytes()
    for vocabulary in home.glob("vocabulary.*"):
        files[vocabulary.name] = vocabulary.read_bytes()
    return weights.label, files


def load_model(weights: Weights, device: str, compute_type: str, threads: int) -> Any:
    """faster_whisper.WhisperModel on these weights, from local files only."""
    from faster_whisper import WhisperModel

    location, files = model_location(weights)
    return WhisperModel(
        location,
        device=device,
        compute_type=compute_type,
        cpu_threads=threads,
        num_workers=1,
        files=files,
        local_files_only=True,
    )


def transcribe(
    model: Any,
    samples: np.ndarray,
    language: str | None,
    task: str | None,
    between: Check | None = None,
) -> Transcript:
    """Transcribe with the baseline's decoding settings. transcribe() is lazy: each 30 s window
    is decoded as its segment is asked for, and `between` runs before each."""
    segments, info = model.transcribe(
        samples,
        language=language,
        task=task or "transcribe",
        beam_size=1,
        best_of=1,
        temperature=0.0,
        without_timestamps=True,
        vad_filter=False,
        condition_on_previous_text=False,
        # The baseline (plain greedy generate) neither skips silent windows nor retries any.
        compression_ratio_threshold=None,
        log_prob_threshold=None,
        no_speech_threshold=None,
    )
    collected = []
    while True:
        if between is not None:
            between()
        segment = next(segments, None)
        if segment is None:
            break
        collected.append(segment)
    text = "".join(s.text for s in collected).strip()
    return Transcript(text, tuple(t for s in collected for t in s.tokens), info.language)


class InProcess:
    """A faster-whisper model in this process (on a GPU); stops between windows."""

    def __init__(
        self, weights: Weights, device: str, compute_type: str, threads: int, check: Check
    ) -> None:
        check()
        self.model = load_model(weights, device, compute_type, threads)
        self.compute_type = str(self.model.model.compute_type)
        self._audio: tuple[np.ndarray, str | None, str | None] | None = None

    @property
    def alive(self) -> bool:
        return True

    def set_audio(
        self, samples: np.ndarray, language: str | None, task: str | None, check: Check
    ) -> str:
        self._audio = (samples, language, task)
        return ""

    def run(self, audio_key: str, check: Check) -> Transcript:
        if self._audio is None:
            raise WorkerError("no clip was handed to faster-whisper")
        return transcribe(self.model, *self._audio, between=check)

    def close(self) -> None:
        self._audio = None


class Worker:
    """A worker process holding one faster-whisper model, asked over a pipe; killed when a
    check raises while it works."""

    def __init__(
        self, weights: Weights, device: str, compute_type: str, threads: int, check: Check
    ) -> None:
        to_parent, from_child = os.pipe()
        to_child, from_parent = os.pipe()
        package_root = str(Path(__file__).resolve().parents[1])
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [package_root, os.environ.get("PYTHONPATH")])
            ),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(to_child), str(from_child)],
            pass_fds=(to_child, from_child),
            stdin=subprocess.DEVNULL,
            env=env,
        )
        os.close(to_child)
        os.close(from_child)
        self._inbox = Connection(to_parent, writable=False)
        self._outbox = Connection(from_parent, readable=False)
        self._lock = threading.Lock()
        try:
            self.compute_type = self._ask(("load", weights, device, compute_type, threads), check)
        except BaseException:  # a model it cannot load, or a stop: no worker is left behind
            self.close()
            raise

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def set_audio(
        self, samples: np.ndarray, language: str | None, task: str | None, check: Check
    ) -> str:
        """Hand the worker a clip; the key names it in `run`."""
        key = uuid.uuid4().hex
        self._ask(("audio", key, np.ascontiguousarray(samples), language, task), check)
        return key

    def run(self, audio_key: str, check: Check) -> Transcript:
        text, token_ids, language = self._ask(("run", audio_key), check)
        return Transcript(text, tuple(token_ids), language)

    def close(self) -> None:
        """End the worker now (a kill: nothing it holds needs saving)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for end in (self._inbox, self._outbox):
            if not end.closed:
                end.close()

    def _ask(self, message: tuple, check: Check) -> Any:
        with self._lock:
            if not self.alive:
                raise WorkerError("the faster-whisper worker has ended")
            try:
                self._outbox.send(message)
                while not self._inbox.poll(POLL_S):
                    if not self.alive:
                        raise WorkerError(
                            f"the faster-whisper worker ended (exit code {self.process.returncode})"
                        )
                    check()
                kind, value = self._inbox.recv()
            except BaseException:  # a stop, a dead worker, a broken pipe: it is done for
                self.close()
                raise
        if kind == "error":
            raise WorkerError(value)
        return value


def serve(inbox: Connection, outbox: Connection) -> None:
    """The worker's loop: load, take a clip, transcribe it on request, until the parent goes."""
    model: Any = None
    audio: tuple[str, np.ndarray, str | None, str | None] | None = None
    while True:
        try:
            kind, *args = inbox.recv()
        except EOFError:  # the parent closed the pipe, or died
            return
        try:
            if kind == "load":
                model = load_model(*args)
                reply: Any = str(model.model.compute_type)
            elif kind == "audio":
                audio, reply = tuple(args), None
            elif kind == "run":
                if audio is None or audio[0] != args[0]:
                    raise WorkerError("no such clip was handed to the worker")
                result = transcribe(model, *audio[1:])
                reply = (result.text, list(result.token_ids), result.language)
            else:
                raise WorkerError(f"unknown request {kind!r}")
        except Exception as e:  # said to the parent, which words it for a person
            outbox.send(("error", f"{type(e).__name__}: {e}"))
            continue
        outbox.send(("ok", reply))


if __name__ == "__main__":
    serve(
        Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False)
    )
