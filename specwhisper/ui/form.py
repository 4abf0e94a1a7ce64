"""The page's top section, the form: the audio with its examples, the main and its assistant,
language and task, the advanced settings (the reference engine among them), and the Compare
button. Builds components, and turns the form's values into the `compare` endpoint's settings;
what the components do when changed or pressed is wired in layout.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from specwhisper import decoding, loading, reference
from specwhisper.examples import Example
from specwhisper.request_check import DEFAULTS
from specwhisper.schedule import SCHEDULES
from specwhisper.ui import gpu_time, texts
from specwhisper.ui.api import API_FIELDS
from specwhisper.ui.choices import FormStart, example_label


@dataclass(frozen=True)
class Form:
    """The form's components; the settings are named as the `compare` endpoint names them."""

    audio: gr.Audio
    main: gr.Dropdown
    assistant: gr.Dropdown
    language: gr.Dropdown
    task: gr.Radio
    main_note: gr.Markdown
    gamma: gr.Slider
    gamma_schedule: gr.Radio
    repeats: gr.Slider
    dtype: gr.Dropdown
    encoder_dtype: gr.Dropdown
    engine: gr.Radio
    timestamps: gr.Checkbox
    temperature: gr.Slider
    seed: gr.Number
    fallback: gr.Checkbox
    reference_on: gr.Checkbox  # also time faster-whisper
    reference_compute_type: gr.Dropdown  # ... in this compute type
    loop_alone: gr.Checkbox  # also time our loop without drafting
    run: gr.Button

    def settings(self) -> dict[str, gr.Component]:
        """Every setting but the audio, by API field name (on_compare's keyword inputs); the
        reference is a checkbox and a compute type, joined by `request_settings`."""
        joined = ("audio", "reference")
        named = {f.name: getattr(self, f.name) for f in API_FIELDS if f.name not in joined}
        return named | {
            "reference_on": self.reference_on,
            "reference_compute_type": self.reference_compute_type,
        }


def request_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The form's values as the endpoint's settings: the reference checkbox and its compute
    type become one `reference` value ("" when off). Settings without them pass unchanged."""
    settings = dict(settings)
    on = settings.pop("reference_on", None)
    compute_type = settings.pop("reference_compute_type", None)
    if on is not None:
        chosen = compute_type or reference.DEFAULT_COMPUTE_TYPE
        settings["reference"] = f"{reference.ENGINE}:{chosen}" if on else ""
    return settings


def form_section(start: FormStart, examples: list[Example]) -> Form:
    """The audio on the left; the pair, language, task and advanced settings on the right."""
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            audio = _audio_input(examples)
        with gr.Column(scale=1, min_width=300):
            main = gr.Dropdown(start.mains, value=start.main, label="Main model (the one you want)")
            assistant = gr.Dropdown(
                start.assistants,
                value=start.assistant,
                label="Assistant (drafts tokens; same tokenizer as the main)",
            )
            with gr.Row(equal_height=False):
                language = gr.Dropdown(
                    start.languages,
                    value="English" if start.english_only else texts.AUTO,
                    label="Language",
                    interactive=not start.english_only,
                    min_width=140,
                )
                task = gr.Radio(
                    ["transcribe", "translate"],
                    value="transcribe",
                    label="Task",
                    interactive=not start.english_only,
                    min_width=140,
                )
            main_note = gr.Markdown(start.main_note, visible=bool(start.main_note))
            with gr.Accordion("Advanced", open=False):
                advanced = _advanced_settings()
            run = gr.Button("Compare", variant="primary", size="lg", interactive=bool(start.mains))
    return Form(audio, main, assistant, language, task, main_note, **advanced, run=run)


def _audio_input(examples: list[Example]) -> gr.Audio:
    """Upload or record, with the example clips under it."""
    audio = gr.Audio(
        sources=["upload", "microphone"],
        type="filepath",
        label="Audio (WAV, FLAC, MP3, OGG, M4A or WEBM; or record)",
    )
    limit = gpu_time.audio_limit_note()
    gr.Markdown(limit, visible=bool(limit))
    if examples:
        gr.Examples(
            examples=[[str(e.path)] for e in examples],
            inputs=[audio],
            example_labels=[example_label(e) for e in examples],
            label="Examples (with their reference text)",
        )
    return audio


def _advanced_settings() -> dict[str, gr.Component]:
    """The settings behind "Advanced", by Form field name."""
    fields: dict[str, gr.Component] = {}
    fields["gamma"] = gr.Slider(
        0, 16, value=DEFAULTS.gamma, step=1, label="Draft tokens per step (γ)"
    )
    fields["gamma_schedule"] = gr.Radio(
        list(SCHEDULES), value=DEFAULTS.gamma_schedule, label="γ schedule", info=texts.SCHEDULE_INFO
    )
    fields["repeats"] = gr.Slider(
        1, 10, value=DEFAULTS.repeats, step=1, label="Timed repeats per side"
    )
    fields["dtype"] = gr.Dropdown(
        texts.DTYPES, value=DEFAULTS.dtype, label="dtype", info=texts.DTYPE_INFO
    )
    fields["encoder_dtype"] = gr.Dropdown(
        texts.ENCODER_DTYPES,
        value=DEFAULTS.encoder_dtype,
        label="Encoder precision (both columns)",
        info=texts.encoder_info(),
    )
    fields["engine"] = gr.Radio(
        [(texts.ENGINE_LABELS[e], e) for e in decoding.ENGINES],
        value=DEFAULTS.engine,
        label="Speculative engine",
        info=texts.ENGINE_INFO,
    )
    fields["timestamps"] = gr.Checkbox(
        DEFAULTS.timestamps, label="Timestamps (segments in both columns)"
    )
    with gr.Row():
        fields["temperature"] = gr.Slider(
            0.0,
            1.0,
            value=DEFAULTS.temperature,
            step=0.1,
            label="Temperature",
            info=texts.TEMPERATURE_INFO,
        )
        fields["seed"] = gr.Number(DEFAULTS.seed, precision=0, label="Seed", minimum=0)
    fields["fallback"] = gr.Checkbox(
        DEFAULTS.fallback,
        label="Whisper's temperature fallback (both columns; our engine only)",
        info=texts.FALLBACK_INFO,
    )
    fields["loop_alone"] = gr.Checkbox(
        False, label=texts.LOOP_ALONE_LABEL, info=texts.LOOP_ALONE_INFO
    )
    fields |= _reference_settings()
    return fields


REFERENCE_INFO = (
    "A third column: faster-whisper, what CPU users often run instead, on the main's CTranslate2 "
    "weights with the baseline's settings (greedy, no timestamps, no VAD), timed the same way. "
    "A different engine: its transcript can differ. It needs a CTranslate2 copy of the main (the "
    "offline checkpoints and faster-whisper's own Hub models have one)."
)


def _reference_settings() -> dict[str, gr.Component]:
    """The reference engine: a checkbox and its compute type; on a GPU, why it is off."""
    offered = reference.compute_types(on_gpu=loading.default_device().type == "cuda")
    with gr.Row():
        on = gr.Checkbox(
            False,
            label="Also time faster-whisper (CTranslate2)",
            info=REFERENCE_INFO if offered else reference.NOT_ON_GPU,
            interactive=bool(offered),
            scale=3,
        )
        compute_type = gr.Dropdown(
            offered or [reference.DEFAULT_COMPUTE_TYPE],
            value=reference.DEFAULT_COMPUTE_TYPE,
            label="faster-whisper compute type",
            min_width=140,
            scale=1,
            visible=bool(offered),
        )
    return {"reference_on": on, "reference_compute_type": compute_type}
