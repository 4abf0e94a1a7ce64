"""The page's device part: the calls that run models on the GPU, and how long they may take.

Loading, the ZeroGPU way. ZeroGPU runs a `spaces.GPU` function (`on_device`, `on_device_batch`)
in a worker process forked from the server's; what the worker loads dies with it. So models
load in the server process, never inside the GPU call: the default pair at start-up, on the
device (ZeroGPU records the `.to("cuda")`, packs those tensors at launch and copies them to the
GPU in each worker; see startup.preload_default_pair), and any other pair on demand, before the
GPU call, into the same cache; every worker forked after that starts with it. ZeroGPU only needs
these functions decorated by the time the server starts: the handlers import this module, so
app.py's `from specwhisper.ui import ...` decorates them.

Everywhere else (no `spaces` package) they are plain functions, run in the handler's thread,
where a run stops at its next model pass once its visitor has gone (specwhisper.ui.stopping);
a forked ZeroGPU worker does not see that stop flag and ends with its GPU call. This module
does not read audio or draw anything.
"""

from __future__ import annotations

from typing import Any

import gradio as gr
import numpy as np

from specwhisper import alignment, batch_mode, compare
from specwhisper.audio import SAMPLE_RATE
from specwhisper.compare import CheckedRequest, CompareRequest

try:  # ZeroGPU on Hugging Face Spaces; a no-op decorator everywhere else
    import spaces
except ImportError:  # pragma: no cover - spaces is in requirements.txt
    spaces = None

MAX_GPU_S = 600  # the longest ZeroGPU call we ask for


def reporter(progress: gr.Progress | None) -> compare.Progress:
    """gradio's progress bar as the engine's progress callback (silent without one)."""

    def report(fraction: float, what: str) -> None:
        if progress is not None:
            progress(fraction, desc=what)

    return report


def gpu_seconds(
    samples: np.ndarray, req: CompareRequest | CheckedRequest, progress: Any = None
) -> int:
    """ZeroGPU time to reserve, loading included: twice the pair's load time as this process
    measured it (a worker forked before that load loads it again; a fresh one only copies it to
    the GPU, which is quicker), 2 x (repeats + 1) runs at 10x real time or faster, and 30 s of
    slack. The cap is the longest call ZeroGPU takes."""
    checked = compare.checked(req)
    main, assistant, _ = compare.load_pair(checked)  # a cache hit: the handler just loaded them
    load_s = main.load_time_s + assistant.load_time_s
    audio_s = len(samples) / SAMPLE_RATE
    repeats = checked.request.repeats
    return int(min(MAX_GPU_S, 30 + 2 * load_s + 0.2 * (repeats + 1) * audio_s))


def on_device(
    samples: np.ndarray, req: CompareRequest | CheckedRequest, progress: gr.Progress | None
) -> dict[str, Any]:
    """The GPU part: both decoders, timed; the compare API's JSON. Inference only: the pair is
    a cache hit (on ZeroGPU, its tensors were copied to the GPU as the worker started). Only a
    worker forked before the pair was loaded has to load it, and its load time says so."""
    result = compare.compare(samples, req, progress=reporter(progress)).to_dict()
    # where each token sits in the audio, for the spectrogram's strip: untimed, after the runs
    return alignment.add_token_times(result, samples, req, reporter(progress))


def batch_gpu_seconds(
    rows: batch_mode.Rows, sizes: list[int], req: CheckedRequest, progress: Any = None
) -> int:
    """ZeroGPU time for batch mode: as `gpu_seconds`, once per batch size (two extra baseline
    runs per row check the batch of one)."""
    runs = len(sizes) * (2 * (req.request.repeats + 1) + 1)
    return int(min(MAX_GPU_S, 30 + 0.1 * runs * rows.duration_s))


def on_device_batch(
    rows: batch_mode.Rows, sizes: list[int], req: CheckedRequest, progress: gr.Progress | None
) -> dict[str, Any]:
    """The GPU part of batch mode: inference only, the pair is a cache hit (see on_device)."""
    main, assistant, _ = compare.load_pair(req)
    report = reporter(progress)

    def on_batch(size: int, i: int, n: int) -> None:
        report((sizes.index(size) + i / n) / len(sizes), f"Batch size {size}: batch {i + 1} of {n}")

    results = list(
        batch_mode.sweep(
            main, assistant, rows, sizes, repeats=req.request.repeats, on_batch=on_batch
        )
    )
    return batch_mode.sweep_json(main, rows, results)


if spaces is not None:
    on_device = spaces.GPU(duration=gpu_seconds)(on_device)
    on_device_batch = spaces.GPU(duration=batch_gpu_seconds)(on_device_batch)
