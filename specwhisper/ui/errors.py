"""Errors worded for a person: what the page and the API say when a request fails."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import gradio as gr

from specwhisper.audio import AudioError
from specwhisper.compare import CompareError
from specwhisper.models import CheckpointError

log = logging.getLogger(__name__)

GENERIC_ERROR = (
    "Something went wrong while comparing; the details are in the server log. "
    "Try again, or try another clip or checkpoint pair."
)


@contextlib.contextmanager
def person_errors() -> Iterator[None]:
    """Input problems become their own sentence on the page; anything else a generic one, with
    the traceback in the server log. Either way the app stays up for the next request."""
    try:
        yield
    except (AudioError, CompareError, CheckpointError) as e:
        raise gr.Error(str(e), print_exception=False) from None
    except gr.Error:
        raise
    except Exception:
        log.exception("compare failed")
        raise gr.Error(GENERIC_ERROR, print_exception=False) from None
