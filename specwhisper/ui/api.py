"""The public `compare` endpoint's parameters, as one table: the hidden components that carry
them, and the request built from them (the page's form, keyed by the same names, goes through
the same builder).

The endpoint's parameter names, order and descriptions come from `run_compare`'s signature and
docstring (gradio reads them there); this table must list the same names in the same order, with
the same defaults, and a test checks that it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from specwhisper.compare import CompareError, CompareRequest
from specwhisper.ui.errors import person_errors

# What the page says when a numeric field holds something else.
NOT_A_NUMBER = {
    "whole": "Draft tokens (gamma), repeats and the seed must be whole numbers.",
    "number": "The temperature must be a number (0: greedy).",
}


@dataclass(frozen=True)
class ApiField:
    """One parameter of `compare`: its hidden component, and how a value from gradio is read
    (numbers arrive as floats or strings, cleared fields as None)."""

    name: str  # run_compare's parameter, and CompareRequest's field (but audio)
    kind: str  # "audio", "text", "whole" (an integer), "number" or "flag"
    # what a caller who leaves it out gets, and a cleared field: run_compare's default where it
    # has one; None for the audio and the pair (the page's pair fills those in)
    default: Any = None
    required: bool = False  # a cleared field is refused, not read as the default

    def component(self, value: Any) -> gr.Component:
        """The hidden component, starting on `value` (the client's default for it)."""
        if self.kind == "audio":
            return gr.Audio(type="filepath")
        if self.kind == "text":
            return gr.Textbox(value)
        if self.kind == "flag":
            return gr.Checkbox(value)
        return gr.Number(value, precision=0) if self.kind == "whole" else gr.Number(value)

    def read(self, value: Any) -> Any:
        """The value as CompareRequest takes it; CompareError for a number that is not one."""
        if self.kind == "flag":
            return bool(value)
        if self.kind == "text":
            return value or self.default or ""
        if not self.required:
            value = value or self.default
        try:
            return int(value) if self.kind == "whole" else float(value)
        except (TypeError, ValueError):
            raise CompareError(NOT_A_NUMBER[self.kind]) from None


API_FIELDS = (
    ApiField("audio", "audio"),
    ApiField("language", "text", "auto"),
    ApiField("task", "text", "transcribe"),
    ApiField("main", "text"),
    ApiField("assistant", "text"),
    ApiField("gamma", "whole", 5, required=True),
    ApiField("gamma_schedule", "text", "adaptive"),
    ApiField("repeats", "whole", 3, required=True),
    ApiField("dtype", "text", "auto"),
    ApiField("timestamps", "flag", False),
    ApiField("engine", "text", "specwhisper"),
    ApiField("temperature", "number", 0.0),
    ApiField("seed", "whole", 0),
    ApiField("fallback", "flag", False),
    ApiField("encoder_dtype", "text", "auto"),
    ApiField("reference", "text", ""),
)


def api_components(main: str, assistant: str) -> list[gr.Component]:
    """The endpoint's hidden inputs, in API_FIELDS order; main and assistant start on the page's
    pair, every other field on run_compare's default."""
    pair = {"main": main, "assistant": assistant}
    return [field.component(pair.get(field.name, field.default)) for field in API_FIELDS]


def compare_request(**settings: Any) -> CompareRequest:
    """The page's or the API's settings, by API_FIELDS name, as a CompareRequest. Cleared fields
    become their defaults, or a sentence on the page."""
    with person_errors():
        values = {f.name: f.read(settings.get(f.name)) for f in API_FIELDS if f.kind != "audio"}
        return CompareRequest(**values)
