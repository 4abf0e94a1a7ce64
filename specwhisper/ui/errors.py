"""Errors worded for a person: what the page and the API say when a request fails.

A sentence never shows where this server keeps its files: errors passed through from libraries
(the Hugging Face cache's folder, a checkpoint folder's full path) are cut to the last part of
each path, or lose a path given in brackets.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

import gradio as gr

from specwhisper.audio import AudioError
from specwhisper.checkpoints import CheckpointError
from specwhisper.request_check import CompareError

log = logging.getLogger(__name__)

GENERIC_ERROR = (
    "Something went wrong while comparing; the details are in the server log. "
    "Try again, or try another clip or checkpoint pair."
)

# An absolute path: /a/b, ~/a or C:\a, not inside a word or a URL ("tokens/s", "https://").
_PATH = r"(?<![\w:/\\.~-])(?:~?/|[A-Za-z]:\\)[^\s'\"()<>,;]+"
SERVER_PATH = re.compile(_PATH)
SERVER_PATH_IN_BRACKETS = re.compile(r"\s*\(" + _PATH + r"\)")


@contextlib.contextmanager
def person_errors() -> Iterator[None]:
    """Input problems become their own sentence on the page; anything else a generic one, with
    the traceback in the server log. Either way the app stays up for the next request."""
    try:
        yield
    except (AudioError, CompareError, CheckpointError) as e:
        raise gr.Error(without_server_paths(str(e)), print_exception=False) from None
    except gr.Error:
        raise
    except Exception:
        log.exception("compare failed")
        raise gr.Error(GENERIC_ERROR, print_exception=False) from None


def without_server_paths(message: str) -> str:
    """`message` with each absolute path cut to "…/" and its last part, and a path in brackets
    ("the cache (/root/.cache/huggingface/hub)") left out: a visitor can do nothing with where
    this server keeps its files, and should not learn it."""
    message = SERVER_PATH_IN_BRACKETS.sub("", message)
    return SERVER_PATH.sub(_last_part, message)


def _last_part(match: re.Match[str]) -> str:
    parts = [p for p in re.split(r"[/\\]", match.group().rstrip(".")) if p not in ("", "~")]
    tail = match.group()[len(match.group().rstrip(".")) :]  # a sentence's full stop stays
    return (f"…/{parts[-1]}" if parts else "…") + tail
