"""The app's server process as ZeroGPU makes it, on this CPU, with spaces' own torch patching.

Run by tests/test_zerogpu_spaces.py in a process of its own (`import spaces` with
SPACES_ZERO_GPU set patches torch for the whole process):

    python tests/zerogpu_server.py MODELS_DIR AUDIO OUT_JSON

spaces 0.51 patches only a CUDA build of torch, and this CPU build lacks what it reads. Before
`import spaces`, the CPU build is given what a CUDA build without a GPU has (which is what
ZeroGPU's server process is: it has no GPU), and nothing of spaces is changed:
- `torch.version.cuda` ("13.0", PyPI's torch 2.13 build): `zero/torch/static.py` reads it;
- `torch._C._cuda_init`, raising as a CUDA build does without a driver: `patching.py` keeps the
  original at import and replaces it with its own raising function in `patch()`;
- `torch.cuda._is_in_bad_fork` as a module-level function: the CPU build's is a lambda, which
  `zero/__init__.py`'s `is_in_bad_fork()` cannot pickle into its fork process pool;
- `torch._C._cuda_getDeviceCount` and `torch.cuda._cudart`, so that `torch.cuda._lazy_init`
  reaches `_cuda_init` (spaces' raising one) instead of stopping at "not compiled with CUDA"
  (torch._dynamo is imported before, as it would import CUDA bindings this build lacks).
SPACES_ZERO_DEVICE_API_URL must be set (spaces' config asserts it) and names a port where
nothing listens: the ZeroGPU scheduler is never asked, since no decorated call runs here.

What runs for real: `import spaces` (its patching, its fork check, the `spaces.GPU` decoration
of the page's device calls), the app's preload on the importing thread, and the page's handlers
in other threads, as gradio runs them. What cannot run without a GPU and the ZeroGPU service:
the scheduling (`client.schedule`), and the worker's `torch.init` (a real `.cuda()`) and
`torch.move`. So each device call runs the undecorated function in a child forked from the
handler's thread, as spaces forks its worker: its arguments and result pickled as spaces queues
them, spaces' own `torch.unpatch()` first (the worker's first step, `worker_init`), then on the
CPU; its failure is handed back through spaces' own `exception_result`, and raised as
`regular_function_wrapper` raises it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["SPACES_ZERO_GPU"] = "true"
os.environ["SPACES_ZERO_DEVICE_API_URL"] = "http://127.0.0.1:9/"  # the discard port: never asked
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402

from specwhisper import request_check


def _no_driver() -> None:
    raise RuntimeError("Found no NVIDIA driver on your system.")  # a CUDA build's words


def _not_in_bad_fork() -> bool:
    return False


# torch._dynamo (which transformers' Whisper imports) takes a _cuda_getDeviceCount to mean a CUDA
# build and imports the rest of the CUDA bindings: it is imported while this is still a CPU build
import torch._dynamo  # noqa: E402, F401

torch.version.cuda = "13.0"
torch._C._cuda_init = _no_driver
torch._C._cuda_getDeviceCount = lambda: 0
torch.cuda._is_in_bad_fork = _not_in_bad_fork
torch.cuda._cudart = object()

import gradio as gr  # noqa: E402
import spaces  # noqa: E402, F401
from spaces.zero import torch as zero_torch  # noqa: E402
from spaces.zero.gradio import error as zero_error  # noqa: E402
from spaces.zero.torch import patching  # noqa: E402
from spaces.zero.wrappers import exception_result  # noqa: E402

CHILD_TIMEOUT_S = 300


def as_worker(task: Callable[..., Any]) -> Callable[..., Any]:
    """`task` (an undecorated device call) in a child forked from the calling thread."""
    context = multiprocessing.get_context("fork")

    def call(*args: Any) -> Any:
        receive, send = context.Pipe(duplex=False)
        queued = pickle.dumps(args)  # spaces queues the arguments to its worker

        def child() -> None:
            try:
                zero_torch.unpatch()
                result = ("ok", task(*pickle.loads(queued)))
            except Exception as e:
                result = ("error", exception_result(e))
            send.send(result)

        process = context.Process(target=child, daemon=True)
        process.start()
        try:
            if not receive.poll(CHILD_TIMEOUT_S):
                raise TimeoutError("the forked device call did not answer")
            kind, value = receive.recv()
        finally:
            process.join(10)
        if kind == "ok":
            return value
        if value.gradio_error is not None:  # wrappers.py, regular_function_wrapper
            raise value.gradio_error
        raise zero_error("ZeroGPU worker error", value.error_cls)

    return call


def in_thread(fn: Callable[[], Any]) -> Any:
    """`fn()` in a new thread, as gradio runs a handler: its result, or the exception."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:
            box["value"] = e
            box["traceback"] = traceback.format_exc()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return box["value"]


def outcome(value: Any) -> dict[str, Any]:
    if isinstance(value, gr.Error):
        return {"error": "gr.Error", "message": value.message}
    if isinstance(value, BaseException):
        return {"error": type(value).__name__, "message": str(value)}
    return {"ok": True}


def main() -> None:
    models_dir, audio, out = sys.argv[1:4]
    os.environ["SPECWHISPER_MODELS"] = models_dir

    from specwhisper import compare, loading
    from specwhisper.request_check import CompareRequest
    from specwhisper.ui import zerogpu
    from specwhisper.ui.batch_mode import run_batch
    from specwhisper.ui.choices import default_pair
    from specwhisper.ui.handlers import on_compare, run_compare
    from specwhisper.ui.startup import preload_default_pair

    report: dict[str, Any] = {
        "cuda_init_is_spaces": torch._C._cuda_init is patching._cuda_init_raise,
        "cuda_available": torch.cuda.is_available(),
        "mode_on_importing_thread": torch._C._len_torch_function_stack() > 0,
        "mode_on_other_thread": in_thread(lambda: torch._C._len_torch_function_stack() > 0),
        "decorated": [hasattr(f, "zerogpu") for f in (zerogpu.on_device, zerogpu.on_device_batch)],
    }

    # the app's start-up, on the importing thread: the default pair "on the GPU"
    main_label, assistant_label = default_pair()
    preload_default_pair()
    default = request_check.check_request(
        CompareRequest(main=main_label, assistant=assistant_label)
    )
    main_model, _, _ = compare.load_pair(default)
    parameter = next(main_model.model.parameters())
    report["default_pair"] = [main_label, assistant_label]
    report["preloaded_on"] = str(parameter.device)
    report["preloaded_recorded"] = parameter in patching.cuda_aliases
    loaded_after_preload = loading.CACHE.total_load_s

    other = CompareRequest(main=main_label, assistant="tiny-random-decoder")
    in_float32 = CompareRequest(main=main_label, assistant=assistant_label, dtype="float32")

    # what loading in a handler's thread meets: spaces' raising _cuda_init
    report["load_in_handler_thread"] = outcome(in_thread(lambda: compare.load_pair(other)))

    zerogpu.on_device = as_worker(zerogpu.on_device.__wrapped__)
    zerogpu.on_device_batch = as_worker(zerogpu.on_device_batch.__wrapped__)

    def page_run(req: CompareRequest) -> dict[str, Any]:
        result = run_compare(
            audio, "auto", "transcribe", req.main, req.assistant, repeats=1, dtype=req.dtype
        )
        return {
            "identical": result["identical"],
            "device": result["device"],
            "load_time_s": result["load_time_s"],
        }

    report["gpu_seconds"] = in_thread(
        lambda: zerogpu.gpu_seconds(
            torch.zeros(16_000).numpy(), request_check.check_request(other), None
        )
    )
    report["other_pair"] = in_thread(lambda: page_run(other))
    report["other_precision"] = in_thread(lambda: page_run(in_float32))
    report["batch"] = outcome(
        in_thread(lambda: run_batch([audio], [1, 2], 1, other.main, other.assistant, "auto"))
    )

    # a failure inside the device call: tiny-unreadable's weights cannot be read
    broken_req = CompareRequest(main="tiny-unreadable", assistant="tiny-random-a")
    report["failure_api"] = outcome(in_thread(lambda: page_run(broken_req)))
    shown = in_thread(lambda: on_compare(audio, None, **vars(broken_req)))
    report["failure_page_verdict"] = shown.verdict if hasattr(shown, "verdict") else repr(shown)
    report["plain_error_as_spaces_shows_it"] = exception_result(
        request_check.CompareError("A sentence.")
    ).error_cls

    report["server_loaded_s"] = loading.CACHE.total_load_s - loaded_after_preload
    Path(out).write_text(json.dumps(report, default=str))


if __name__ == "__main__":
    main()
