"""Runs that stop when nobody waits for them.

gradio runs a sync handler in a worker thread and never stops that thread: when a visitor
cancels (the page's stop, a client's `job.cancel()`), gradio cancels the asyncio task awaiting
it, which frees the single compare slot while the thread goes on computing beside the next
visitor's timed run; when a visitor closes the page, gradio only marks the run's queue entry
as no longer alive, and the run keeps the slot to its end. `stops_when_gone` turns the handler
into an async one that gradio awaits instead, and on either signal sets the run's stop flag
(specwhisper.cancel), so the models stop at their next pass (and faster-whisper's worker process
is ended); the slot is given back only then, or after STOPPING_S if a pass takes longer, so the
next run starts on a free machine.

On ZeroGPU the models run in a worker process forked for the GPU call, where this flag is not
seen: there the run ends with the call (spaces bounds its time).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

import gradio as gr

from specwhisper import cancel

POLL_S = 0.2  # how often the run's queue entry is read; a stop then takes one pass more
# The longest a cancel waits for the run to stop, and so the longest its request takes: gradio's
# /cancel awaits the handler, and gradio_client gives that request httpx's default 5 s. Every
# part of a run stops within a second or so (a model pass; the reference's worker is killed).
STOPPING_S = 3.0

GONE = "The run was stopped: its page was closed before the result came."


def stops_when_gone(handler: Callable[..., Any]) -> Callable[..., Any]:
    """`handler` as an async gradio handler with the same signature and docstring (gradio
    reads the endpoint's parameters there), run in a thread that stops between two model
    passes once its visitor cancels or closes the page. Plain handlers only: a generator's
    steps would each need their own thread call, so one is refused as the page is built."""
    if inspect.isgeneratorfunction(handler) or inspect.iscoroutinefunction(handler):
        raise TypeError(f"stops_when_gone takes a plain function, not {handler.__name__}")

    @functools.wraps(handler)
    async def run(*args: Any, **kwargs: Any) -> Any:
        flag = threading.Event()
        watcher = asyncio.create_task(_watch(_queue_entry(), flag))
        context = contextvars.copy_context()  # gradio's progress bar reads it in the thread
        call = functools.partial(context.run, _flagged, flag, handler, args, kwargs)
        work = asyncio.get_running_loop().run_in_executor(None, call)
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:  # a cancel: gradio frees the slot when this returns
            flag.set()
            await asyncio.wait({work}, timeout=STOPPING_S)
            if work.done() and not work.cancelled():
                work.exception()  # retrieved: a Cancelled is the expected end, not an error
            raise
        except cancel.Cancelled:  # the page was closed; nobody reads this, but the log does
            raise gr.Error(GONE, print_exception=False) from None
        finally:
            watcher.cancel()

    return run


def _flagged(
    flag: threading.Event, handler: Callable[..., Any], args: tuple, kwargs: dict[str, Any]
) -> Any:
    with cancel.stop_on(flag):
        return handler(*args, **kwargs)


async def _watch(entry: Any, flag: threading.Event) -> None:
    """Set `flag` when gradio marks the run's queue entry as no longer alive: its visitor's
    page (or client) closed the connection it listens on."""
    while entry is not None and not flag.is_set():
        if not getattr(entry, "alive", True):
            flag.set()
            return
        await asyncio.sleep(POLL_S)


def _queue_entry() -> Any:
    """gradio's queue entry for the run being handled, None outside gradio's queue (a direct
    call, a test). gradio 6 has no public way to ask whether a run's visitor is still there;
    this reads what its own routes read (`event_ids_to_events`, keyed by the event id it puts
    in the handler's context), and falls back to None if that ever moves."""
    from gradio.context import LocalContext

    blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    entries = getattr(getattr(blocks, "_queue", None), "event_ids_to_events", None)
    return entries.get(event_id) if isinstance(entries, dict) and event_id else None
