"""Stopping a run that nobody waits for, between two model passes.

Whoever starts a run may hand it a flag (`stop_on`, a context variable: the run's thread, and
any thread started with a copy of its context, sees it). Every model the model cache holds
checks the flag before each pass of its encoder and decoder (`check_before_passes`), and once it
is set the run raises `Cancelled` there: within one decoder step, or one 30 s window of the
encoder, wherever the run is (prefill, drafting, verifying, a timed repeat, a warm-up).

Runs without a flag never stop: the benchmark and the tests pay one context-variable read per
pass. It knows nothing of gradio (the page sets the flag when its visitor leaves) and nothing
of Whisper beyond `get_encoder`/`get_decoder`.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch

_FLAG: ContextVar[threading.Event | None] = ContextVar("specwhisper_stop_flag", default=None)
_CHECKED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()  # modules with the hook


class Cancelled(BaseException):
    """The run was stopped because its flag was set. A BaseException, like asyncio's
    CancelledError: a stop is not a failure, so the `except Exception` of the code it passes
    through (which words failures for a person, or empties the model cache) lets it by."""


@contextlib.contextmanager
def stop_on(flag: threading.Event) -> Iterator[None]:
    """Runs started inside stop at their next model pass once `flag` is set."""
    token = _FLAG.set(flag)
    try:
        yield
    finally:
        _FLAG.reset(token)


def check() -> None:
    """Raise Cancelled if this run's flag is set; nothing for a run without a flag."""
    flag = _FLAG.get()
    if flag is not None and flag.is_set():
        raise Cancelled("the run was stopped: nobody waits for its result")


def _check_hook(module: torch.nn.Module, args: Any) -> None:
    check()


def check_before_passes(model: torch.nn.Module) -> None:
    """Check the flag before every forward pass of `model`'s encoder and decoder (of the model
    itself when it has neither). Once per module, however often it is asked: a hook is never
    added twice, and modules shared by several models are checked once."""
    parts = []
    for getter in ("get_encoder", "get_decoder"):
        part = getattr(model, getter, lambda: None)()
        if isinstance(part, torch.nn.Module) and part is not model:  # a CausalLM's is itself
            parts.append(part)
    for part in parts or [model]:
        if part not in _CHECKED:
            part.register_forward_pre_hook(_check_hook)
            _CHECKED.add(part)
