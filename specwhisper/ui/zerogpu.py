"""The page's device part: the calls that run models on the GPU, and how long they may take.

Loading, the ZeroGPU way. ZeroGPU runs a `spaces.GPU` function (`on_device`, `on_device_batch`)
in a worker process forked from the server's. In the server process spaces 0.51 replaces
`torch._C._cuda_init` with a function that raises (`zero/torch/patching.py`, `patch`), and the
emulation that records a `.to("cuda")` is a TorchFunctionMode entered on the thread that
imported spaces only (the same `patch`, and its TODO on threads), while gradio runs handlers in
other threads. So the server process loads the default pair at start-up, on the importing thread
(startup.preload_default_pair: the tensors are packed at launch and copied to the GPU in every
worker), and nothing else: any other pair or precision loads here, inside the GPU call, where
CUDA is real. spaces keeps an idle worker for the next call (`wrappers.py`,
`schedule_response.idle`), so a pair loaded in one call is a cache hit in the next call that
worker serves; gpu_time budgets the load whenever the server process does not hold the pair.

The request is checked again where it runs: the device and `auto` precision are the worker's.
Whatever fails in here leaves as a `gr.Error` with the project's sentence, since spaces shows a
visitor any other exception from the worker as its class name (`wrappers.py`,
`exception_result`). ZeroGPU only needs these functions decorated by the time the server starts:
the handlers import this module, so app.py's `from specwhisper.ui import ...` decorates them.

Everywhere else (no `spaces` package, or not on ZeroGPU) they are plain functions, run in the
handler's thread, where a run stops at its next model pass once its visitor has gone
(specwhisper.ui.stopping); a forked ZeroGPU worker does not see that stop flag and ends with its
GPU call. This module does not read audio or draw anything.
"""

from __future__ import annotations

from typing import Any

import gradio as gr
import numpy as np

from specwhisper import alignment, batch_mode, compare, request_check
from specwhisper.audio import SAMPLE_RATE
from specwhisper.request_check import CheckedRequest, CompareRequest
from specwhisper.ui import gpu_time
from specwhisper.ui.errors import person_errors
from specwhisper.ui.tokens import result_token_ids, token_pieces

try:  # ZeroGPU on Hugging Face Spaces; a no-op decorator everywhere else
    import spaces
except ImportError:  # pragma: no cover - spaces is in requirements.txt
    spaces = None


def reporter(progress: gr.Progress | None) -> compare.Progress:
    """gradio's progress bar as the engine's progress callback (silent without one)."""

    def report(fraction: float, what: str) -> None:
        if progress is not None:
            progress(fraction, desc=what)

    return report


def gpu_seconds(
    samples: np.ndarray, req: CompareRequest | CheckedRequest, progress: Any = None
) -> int:
    """ZeroGPU time to request for `on_device`: gpu_time.compare_work."""
    audio_s = len(samples) / SAMPLE_RATE
    return gpu_time.compare_work(audio_s, request_check.checked(req)).seconds


def on_device(
    samples: np.ndarray, req: CompareRequest | CheckedRequest, progress: gr.Progress | None
) -> tuple[dict[str, Any], dict[int, str]]:
    """The GPU part: the pair loaded (a cache hit for the preloaded pair, and for a pair this
    worker loaded before), both decoders timed, then each token placed in the audio. Returns the
    compare API's JSON and the text of every token id in it."""
    with person_errors():
        # checked again here: the device is this process's (a ZeroGPU worker's)
        here = request_check.check_request(request_check.checked(req).request)
        result = compare.compare(samples, here, progress=reporter(progress)).to_dict()
        # where each token sits in the audio, for the spectrogram's strip: untimed, after the runs
        result = alignment.add_token_times(result, samples, here, reporter(progress))
        main, _, _ = compare.load_pair(here)  # a cache hit: the comparison has just run on it
        return result, token_pieces(main.processor.tokenizer, result_token_ids(result))


def batch_gpu_seconds(
    rows: batch_mode.Rows, sizes: list[int], req: CheckedRequest, progress: Any = None
) -> int:
    """ZeroGPU time to request for `on_device_batch`: gpu_time.batch_work."""
    return gpu_time.batch_work(rows.duration_s, len(sizes), req).seconds


def on_device_batch(
    rows: batch_mode.Rows, sizes: list[int], req: CheckedRequest, progress: gr.Progress | None
) -> dict[str, Any]:
    """The GPU part of batch mode: the pair loaded (as in on_device), the sweep run."""
    with person_errors():
        here = request_check.check_request(req.request)
        report = reporter(progress)
        main, assistant, _ = compare.load_pair(here, progress=report)

        def on_batch(size: int, i: int, n: int) -> None:
            done = (sizes.index(size) + i / n) / len(sizes)
            report(done, f"Batch size {size}: batch {i + 1} of {n}")

        repeats = here.request.repeats
        results = list(
            batch_mode.sweep(main, assistant, rows, sizes, repeats=repeats, on_batch=on_batch)
        )
        return batch_mode.sweep_json(main, rows, results)


if spaces is not None:
    on_device = spaces.GPU(duration=gpu_seconds)(on_device)
    on_device_batch = spaces.GPU(duration=batch_gpu_seconds)(on_device_batch)
