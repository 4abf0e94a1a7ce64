"""What app.py does once at start-up besides building the page: load the default pair ahead of
the first visitor where that is wanted, the options the server launches with, and the gradio
queue work this app has no use for."""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any

import torch

from specwhisper import compare
from specwhisper.audio import AudioLimits
from specwhisper.checkpoints import CheckpointError
from specwhisper.request_check import CompareError, CompareRequest
from specwhisper.ui.choices import default_pair
from specwhisper.ui.hardware import torch_hardware

log = logging.getLogger(__name__)


def preload_wanted(module_name: str) -> bool:
    """Whether importing the app loads the default pair: SPECWHISPER_PRELOAD=1 or 0 if set;
    otherwise only when running as the app (`python app.py`, or on a Space, which sets SPACE_ID),
    so that tools importing the app's module pay no load."""
    flag = os.environ.get("SPECWHISPER_PRELOAD", "").strip().lower()
    if flag:
        return flag in ("1", "true", "yes", "on")
    return module_name == "__main__" or bool(os.environ.get("SPACE_ID"))


def preload_default_pair() -> None:
    """Load the page's default pair now, on the device. On ZeroGPU, tensors moved to CUDA before
    launch are packed to disk at launch and copied to the GPU in every worker, so no visitor
    waits for the default pair. It must run on the thread that imported `spaces`, the only one
    whose `.to("cuda")` ZeroGPU records; every other pair loads inside the GPU call (see
    specwhisper.ui.zerogpu)."""
    main, assistant = default_pair()
    try:
        compare.load_pair(CompareRequest(main=main, assistant=assistant))
    except (CheckpointError, CompareError) as e:  # the page still starts, and says why later
        log.warning("The default pair %s + %s was not preloaded: %s", main, assistant, e)


# Events between two rebuilds of gradio's monitoring summary: in effect, never.
ANALYTICS_EVERY = str(10**12)


def skip_queue_analytics() -> None:
    """Before the queue is made: gradio's queue rebuilds a pandas summary of up to 10,000 past
    events after every event, for a monitoring dashboard this app never turns on (launch's
    enable_monitoring), in a thread beside the next run; and pandas 3 flags the calls it makes
    (Pandas4Warning, twice an event). GRADIO_ANALYTICS_CACHE_FREQUENCY is how often it does
    that; a value set in the environment wins."""
    os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", ANALYTICS_EVERY)


def launch_options() -> dict[str, Any]:
    """Keyword arguments for demo.launch(): the upload limit (SPECWHISPER_MAX_FILE_MIB), and the
    MCP server, so agents can call `compare` as a tool, when gradio's `mcp` extra is installed
    (`gradio[mcp]`; without it gradio refuses to launch with mcp_server=True). Logs what
    hardware torch sees, once, as the server starts."""
    log.info("Hardware: %s", torch_hardware().line())
    limits = AudioLimits.from_env(on_gpu=torch.cuda.is_available())
    mcp = importlib.util.find_spec("mcp") is not None
    if not mcp:
        log.warning('The MCP server is off: install gradio with its extra, "gradio[mcp]".')
    return {"max_file_size": limits.max_file_bytes, "mcp_server": mcp}
