"""What the form offers: the mains, the assistants that fit a main, the pair the page starts on,
the example clips and their reference texts. It reads the checkpoint registry
(specwhisper.checkpoints) and loads nothing."""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import torch

from specwhisper import checkpoints, hub
from specwhisper.checkpoints import CheckpointError
from specwhisper.examples import Example, read_manifest
from specwhisper.languages import all_languages, main_languages
from specwhisper.ui import texts
from specwhisper.ui.texts import APP_DIR, models_notice

log = logging.getLogger(__name__)

TURBO = "openai/whisper-large-v3-turbo"  # the main with no assistant but itself (TURBO_NOTE)

# Above the form when the Hub was not switched off but did not answer at start-up.
HUB_UNREACHABLE = (
    "**The Hugging Face Hub did not answer** when this server started, so only its local "
    "checkpoints and the Hub checkpoints already in its cache are listed."
)


def default_pair() -> tuple[str, str]:
    """The (main, assistant) labels the page starts on, for this hardware and Hub access."""
    return checkpoints.default_pair(on_gpu=torch.cuda.is_available(), hub=not hub.hub_offline())


def main_settings(main: str | None) -> tuple[list[str], str, bool, str]:
    """(assistant choices, default assistant, English-only?, note) for a main label."""
    if not main:
        return [checkpoints.SELF_INT8], checkpoints.SELF_INT8, False, ""
    try:
        ckpt = checkpoints.resolve(main, role="main")
    except CheckpointError as e:
        return [checkpoints.SELF_INT8], checkpoints.SELF_INT8, False, str(e)
    choices = checkpoints.assistant_choices(ckpt, include_hub=not hub.hub_offline())
    note = ""
    if ckpt.english_only:
        note = (
            f"{ckpt.label} is English-only: it always transcribes English, so language and task "
            "are fixed. Pick a multilingual main to choose them."
        )
    if ckpt.id == TURBO:
        note = texts.TURBO_NOTE
    return choices, _default_assistant(choices, ckpt), ckpt.english_only, note


def _default_assistant(choices: list[str], main: checkpoints.Checkpoint) -> str:
    """self-int8 where it is offered (CPU); on GPU a distil model, else another one; the main
    itself only when nothing else can draft for it (turbo on a GPU)."""
    if checkpoints.SELF_INT8 in choices:
        return checkpoints.SELF_INT8
    others = [c for c in choices if c != main.label]
    distil = [c for c in others if "distil" in c]
    return (distil or others or choices)[0]


def language_choices(main: str | None) -> list[str]:
    """Auto-detect and the languages the main has a token for, by name (all of Whisper's when
    the main is unknown: choosing one then gets the checkpoint's own sentence)."""
    codes: tuple[str, ...] = tuple(all_languages())
    if main:
        try:
            codes = main_languages(checkpoints.resolve(main, role="main"))
        except CheckpointError:
            pass
    return [texts.AUTO, *sorted(all_languages()[code].title() for code in codes)]


def on_main_change(main: str, language: str | None = None) -> tuple[Any, Any, Any, Any]:
    """Offer the assistants that share the main's tokenizer, and the languages it knows (the
    chosen one kept where it has it); fix language and task for English-only mains."""
    choices, assistant, english_only, note = main_settings(main)
    offered = language_choices(main)
    if english_only:
        language = gr.update(choices=offered, value="English", interactive=False)
        task = gr.update(value="transcribe", interactive=False)
    else:
        kept = language if language in offered else texts.AUTO
        language = gr.update(choices=offered, value=kept, interactive=True)
        task = gr.update(interactive=True)
    note_update = gr.update(value=note, visible=bool(note))
    return gr.update(choices=choices, value=assistant), language, task, note_update


def examples() -> list[Example]:
    """The example clips under the form; none, with a warning, if their manifest is broken."""
    try:
        return read_manifest(APP_DIR / "examples" / "manifest.tsv")
    except ValueError:
        log.warning("examples/manifest.tsv is missing or broken; the page has no examples")
        return []


def example_label(example: Example) -> str:
    """An example's button: language, duration and the first words said."""
    duration = f"{example.duration_s:.0f} s" if example.duration_s else ""
    words = example.reference_text.split()
    preview = " ".join(words[:6]) + (" …" if len(words) > 6 else "")
    return " · ".join(x for x in (example.language, duration, f"“{preview}”") if x)


def reference_for(audio: str | None) -> str:
    """The reference text of an example clip, matched by the file's bytes (gradio hands an
    example over as a copy under another folder); empty for other audio, a visitor's own file
    named like an example included."""
    if not audio:
        return ""
    path = Path(audio)
    try:
        candidates = _example_texts().get(path.stat().st_size, {})
        return candidates.get(_digest(path), "") if candidates else ""
    except OSError:
        return ""


@functools.cache
def _example_texts() -> dict[int, dict[str, str]]:
    """Each example's reference text by its file's size, then its bytes' digest: only a file of
    an example's size is read."""
    texts: dict[int, dict[str, str]] = {}
    for example in examples():
        try:
            texts.setdefault(example.path.stat().st_size, {})[_digest(example.path)] = (
                example.reference_text
            )
        except OSError:
            log.warning("example %s cannot be read; it gets no reference text", example.path.name)
    return texts


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()  # a file the page took: 50 MiB at most


@dataclass(frozen=True)
class FormStart:
    """What the form shows as the page loads."""

    mains: list[str]  # every main offered; empty when no checkpoint is available
    main: str | None  # the default pair's main where offered, else the first; None: no main
    languages: list[str]  # Auto-detect and the languages the main knows, by name
    assistants: list[str]  # the assistants that fit it
    assistant: str
    english_only: bool  # language and task fixed to English transcription
    main_note: str  # what to know about this main ("" for most)
    notice: str  # above the form: offline mode, or how to get weights ("" online)


def form_start() -> FormStart:
    """The mains on offer and the pair the page starts on, for this hardware and Hub access."""
    offline = hub.hub_offline()
    mains = [c.label for c in checkpoints.main_choices(include_hub=not offline)]
    main, assistant = default_pair()
    if main not in mains:  # nothing available: the page says how to get weights
        main = mains[0] if mains else None
    assistants, default_assistant, english_only, main_note = main_settings(main)
    if assistant not in assistants:
        assistant = default_assistant
    notice = models_notice(mains, offline)
    if offline and mains and not hub.offline_mode():
        notice = HUB_UNREACHABLE
    return FormStart(
        mains,
        main,
        language_choices(main),
        assistants,
        assistant,
        english_only,
        main_note,
        notice,
    )
