"""The public `compare` endpoint's parameters, as one table: the hidden components that carry
them, and the request built from them (the page's form, keyed by the same names, goes through
the same builder).

The endpoint's parameter names, order and descriptions come from `run_compare`'s signature and
docstring (gradio reads them there); this table must list the same names in the same order, with
the same defaults, and a test checks that it does.

Every value a caller sends is checked here, before anything loads or runs, and a wrong one is
refused with a sentence that names its field: the hidden components hand their values over
untouched (gradio's own Number would round 2.5 to 2, or fail on 'abc' with a bare "error"
before the app could say anything). What the values mean (a known checkpoint, gamma within
0..64) is checked by `request_check.check_request`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import gradio as gr
from gradio.data_classes import FileData
from pydantic import ValidationError

from specwhisper.request_check import DEFAULTS, CompareError, CompareRequest
from specwhisper.ui.errors import person_errors

# torch.manual_seed takes 0 .. 2**64 - 1, but a JSON number above 2**53 loses digits in
# JavaScript, and numpy's seeds stop at 2**32 - 1: the range every client reads back exactly.
MAX_SEED = 2**32 - 1
ECHO_CHARS = 40  # a caller's value quoted in a sentence is cut to this many characters
AUDIO_TYPE = (
    "The audio must be a file reference, as gradio_client's handle_file(a path or a URL) "
    "makes, not {value}."
)


@dataclass(frozen=True)
class ApiField:
    """One parameter of `compare`: its hidden component, and how a value from gradio is read
    (cleared fields arrive as None)."""

    name: str  # run_compare's parameter, and CompareRequest's field (but audio)
    kind: str  # "audio", "text", "whole" (an integer), "number" or "flag"
    # what a caller who leaves it out gets, and a cleared field (None or ""): run_compare's
    # default where it has one; None for the audio and the pair (the page's pair fills those in)
    default: Any = None
    required: bool = False  # a cleared field is refused, not read as the default
    label: str = ""  # how a sentence names the field (it contains `name`, for API callers)
    max_chars: int = ECHO_CHARS  # text: the longest value any valid choice needs
    max_value: int | None = None  # whole: the largest accepted (the smallest is checked later)

    def component(self, value: Any) -> gr.Component:
        """The hidden component, starting on `value` (the client's default for it), handing
        over what the caller sent untouched: gradio's Textbox would turn a list into the text
        "['a']", its Number round 2.5 to 2 and answer 'abc' with a bare error before the app
        runs, and its Audio do the same for a bare path. (Set on the instance: a subclass of a
        gradio component makes gradio write a .pyi file beside this one at import.)"""
        if self.kind == "audio":
            audio = gr.Audio(type="filepath")
            audio.data_model = AudioFile
            return audio
        if self.kind == "flag":
            return gr.Checkbox(value)  # its preprocess passes the value untouched already
        if self.kind == "text":
            component = gr.Textbox(value)
        else:
            component = gr.Number(value, precision=0 if self.kind == "whole" else None)
        component.preprocess = as_sent
        return component

    def read(self, value: Any) -> Any:
        """The value as CompareRequest takes it; CompareError naming the field if it is not."""
        if value is None or (isinstance(value, str) and not value):  # a cleared field
            value = None if self.required else self.default
        if self.kind == "flag":
            return self._flag(value)
        if self.kind == "text":
            return self._text(value)
        return self._number(value)

    def _flag(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise CompareError(f"{self.label} must be true or false, not {echo(value)}.")
        return value

    def _text(self, value: Any) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            raise CompareError(f"{self.label} must be text, not {echo(value)}.")
        if len(value) > self.max_chars:
            raise CompareError(
                f"{self.label} is {len(value):,} characters long, over the {self.max_chars} any "
                f"valid one needs (it starts {echo(value)})."
            )
        return value

    def _number(self, value: Any) -> int | float:
        whole = self.kind == "whole"
        wanted = "a whole number" if whole else "a number"
        if value is None:
            raise CompareError(f"{self.label} is empty; it must be {wanted}.")
        # bool is an int to Python, but true is not a count of anything
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise CompareError(f"{self.label} must be {wanted}, not {echo(value)}.")
        if not math.isfinite(value) or (whole and not float(value).is_integer()):
            raise CompareError(f"{self.label} must be {wanted}, not {echo(value)}.")
        if not whole:
            return float(value)
        if self.max_value is not None and not 0 <= value <= self.max_value:
            raise CompareError(
                f"{self.label} must be between 0 and {self.max_value:,}, not {echo(value)}."
            )
        return int(value)


def echo(value: Any) -> str:
    """A caller's value as a sentence quotes it: short, and a container named by its kind (it
    may hold anything, at any length)."""
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)  # as the caller wrote it: JSON's true, not Python's True
    text = value if isinstance(value, str) else repr(value)
    if len(text) > ECHO_CHARS:
        text = text[:ECHO_CHARS] + "…"
    return repr(text) if isinstance(value, str) else text


API_FIELDS = (
    ApiField("audio", "audio"),
    ApiField("language", "text", DEFAULTS.language, label="The language"),
    ApiField("task", "text", DEFAULTS.task, label="The task"),
    # a Hub id has at most 96 characters, a folder name at most 255 bytes
    ApiField("main", "text", label="The main checkpoint", max_chars=255),
    ApiField("assistant", "text", label="The assistant checkpoint", max_chars=255),
    ApiField(
        "gamma", "whole", DEFAULTS.gamma, required=True, label="Gamma (draft tokens per step)"
    ),
    ApiField(
        "gamma_schedule",
        "text",
        DEFAULTS.gamma_schedule,
        label="The gamma schedule (gamma_schedule)",
    ),
    ApiField(
        "repeats", "whole", DEFAULTS.repeats, required=True, label="Repeats (timed runs per side)"
    ),
    ApiField("dtype", "text", DEFAULTS.dtype, label="The dtype"),
    ApiField("timestamps", "flag", DEFAULTS.timestamps, label="Timestamps"),
    ApiField("engine", "text", DEFAULTS.engine, label="The engine"),
    ApiField("temperature", "number", DEFAULTS.temperature, label="The temperature"),
    ApiField("seed", "whole", DEFAULTS.seed, label="The seed", max_value=MAX_SEED),
    ApiField("fallback", "flag", DEFAULTS.fallback, label="Fallback"),
    ApiField(
        "encoder_dtype", "text", DEFAULTS.encoder_dtype, label="The encoder dtype (encoder_dtype)"
    ),
    ApiField("reference", "text", DEFAULTS.reference, label="The reference engine"),
    ApiField("loop_alone", "flag", DEFAULTS.loop_alone, label="Loop alone (loop_alone)"),
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


def accept_short_calls(demo: gr.Blocks) -> None:
    """Let a call to `compare` leave out trailing fields, which then take their defaults.

    gradio_client fills in the defaults itself (the `parameter_default` of view_api), but a
    plain HTTP call with fewer values than the endpoint has reaches gradio's own check
    (`Blocks.validate_inputs`), whose error a caller sees only as "The upstream Gradio app has
    raised an exception". That check gets the request's own list of values, which gradio then
    reads, so filling it in there is enough; a left-out audio reads as "No audio file was
    given".
    """
    validate_inputs = demo.validate_inputs

    def fill_left_out(block_fn: Any, inputs: list[Any]) -> None:
        if block_fn.api_name == "compare" and len(inputs) < len(block_fn.inputs):
            inputs.extend(component.value for component in block_fn.inputs[len(inputs) :])
        validate_inputs(block_fn, inputs)

    demo.validate_inputs = fill_left_out


def as_sent(payload: Any) -> Any:
    """A hidden component's preprocess: the value as the caller sent it, for ApiField.read."""
    return payload


class AudioFile(FileData):
    """gradio's file reference, checked with a sentence: gradio checks it before the app runs,
    and a value that is not one (a bare path, a list) would end in a bare "error"."""

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> FileData:
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError:
            raise gr.Error(AUDIO_TYPE.format(value=echo(obj)), print_exception=False) from None
