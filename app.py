"""specwhisper's web page: one audio, Whisper with and without speculative decoding, side by side.

UI only. The handlers read the audio (specwhisper.audio), run specwhisper.compare and draw its
result. The public API is one endpoint, `compare`, whose answer is `Comparison.to_dict()` plus
the audio notes; the Compare button runs the same code and renders the page from that dict.

It does not decode, load or time models itself, and nothing runs at import but building the page.
"""

from __future__ import annotations

import atexit
import contextlib
import html
import json
import logging
import re
import shutil
import tempfile
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np
import pandas as pd
import torch
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from specwhisper import compare, models
from specwhisper.audio import SAMPLE_RATE, AudioError, AudioLimits, load_audio
from specwhisper.compare import CompareError, CompareRequest
from specwhisper.examples import Example, read_manifest
from specwhisper.models import CheckpointError

try:  # ZeroGPU on Hugging Face Spaces; a no-op decorator everywhere else
    import spaces
except ImportError:  # pragma: no cover - spaces is in requirements.txt
    spaces = None

log = logging.getLogger("specwhisper.app")

HERE = Path(__file__).resolve().parent
AUTO = "Auto-detect"
LANGUAGE_CHOICES = [AUTO, *sorted(name.title() for name in LANGUAGES.values())]
SCHEDULES = ["adaptive", "constant", "heuristic"]
DTYPES = ["auto", "float32", "float16", "bfloat16"]
ENGINES = [
    ("specwhisper (our loop)", "specwhisper"),
    ("transformers (assisted generation)", "transformers"),
]
GENERIC_ERROR = (
    "Something went wrong while comparing; the details are in the server log. "
    "Try again, or try another clip or checkpoint pair."
)
MAX_STEP_ROWS = 300  # the per-step table stops here; the coloured transcript shows every token
CONTEXT_TOKENS = 8  # tokens shown on each side of a divergence

HEADER = """
# specwhisper: Whisper, faster, with the very same transcript

**Speculative decoding** pairs the Whisper you want (the *main* model) with a cheap *assistant*.
The assistant drafts γ tokens ahead; the main model checks all of them in a single forward pass,
keeps the longest prefix it agrees with and adds one token of its own: a correction where the
draft went wrong, or a bonus when the whole draft was right. Every kept token is one the main
model would have picked itself, so the greedy output is unchanged, token for token; only the
number of slow main passes drops. The demo runs at **batch size 1**, one person waiting for one
transcript: there each main pass is bound by reading the weights, not by arithmetic, so checking
γ + 1 tokens costs about as much as producing one. Pick a clip, press **Compare**, and see both
transcripts, both timings and which tokens the assistant got right.
"""

# Token origins in the draft-token view: (background, legend label).
ORIGINS = {
    "draft": ("rgba(34, 197, 94, 0.30)", "accepted draft token"),
    "correction": ("rgba(239, 68, 68, 0.30)", "main model: correction after a rejection"),
    "bonus": ("rgba(59, 130, 246, 0.30)", "main model: bonus after a fully accepted draft"),
    "main": ("rgba(148, 163, 184, 0.30)", "main model: first token, or a step without a draft"),
}
_SPECIAL_TOKEN = re.compile(r"<\|[^|]*\|>")


# ---------------------------------------------------------------------------------------------
# Handlers


def run_compare(
    audio: str | None,
    language: str,
    task: str,
    main: str,
    assistant: str,
    gamma: int = 5,
    gamma_schedule: str = "adaptive",
    repeats: int = 3,
    dtype: str = "auto",
    timestamps: bool = False,
    engine: str = "specwhisper",
    progress: gr.Progress = gr.Progress(),  # noqa: B008 - gradio's way to ask for a progress bar
) -> dict[str, Any]:
    """The public `compare` endpoint: transcribe `audio` with `main` alone and with `assistant`
    drafting for it. Returns Comparison.to_dict() plus `audio_notes`; raises gr.Error with a
    sentence a person can act on."""
    result, _ = _compare(
        audio, language, task, main, assistant, gamma, gamma_schedule, repeats, dtype,
        timestamps, engine, progress,
    )  # fmt: skip
    return result


def on_compare(
    audio: str | None,
    language: str,
    task: str,
    main: str,
    assistant: str,
    gamma: int,
    gamma_schedule: str,
    repeats: int,
    dtype: str,
    timestamps: bool,
    engine: str,
    progress: gr.Progress = gr.Progress(),  # noqa: B008
) -> tuple[Any, ...]:
    """The Compare button: the same run as the API, drawn into the page."""
    result, pieces = _compare(
        audio, language, task, main, assistant, gamma, gamma_schedule, repeats, dtype,
        timestamps, engine, progress,
    )  # fmt: skip
    for note in result["audio_notes"]:
        gr.Warning(note)
    return (
        render_verdict(result, pieces),
        render_side(result, "baseline"),
        render_side(result, "speculative"),
        render_draft_tokens(result, pieces),
        markdown_table(result),
        write_json(result),
        timings_frame(result),
    )


def _compare(
    audio: str | None,
    language: str,
    task: str,
    main: str,
    assistant: str,
    gamma: int,
    gamma_schedule: str,
    repeats: int,
    dtype: str,
    timestamps: bool,
    engine: str,
    progress: gr.Progress | None,
) -> tuple[dict[str, Any], dict[int, str]]:
    """Check the request, read the audio, run the comparison: (API dict, text of each token)."""
    with _person_errors():
        try:
            gamma, repeats = int(gamma), int(repeats)
        except (TypeError, ValueError):
            raise CompareError("Draft tokens (gamma) and repeats must be whole numbers.") from None
        req = CompareRequest(
            main=main or "",
            assistant=assistant or "",
            language=language or "auto",
            task=task or "transcribe",
            gamma=gamma,
            gamma_schedule=gamma_schedule or "adaptive",
            repeats=repeats,
            dtype=dtype or "auto",
            timestamps=bool(timestamps),
            engine=engine or "specwhisper",
        )
        compare.check_request(req)  # a wrong checkpoint or language is reported before decoding
        if progress is not None:
            progress(0.0, desc="Reading the audio")
        clip = load_audio(audio, AudioLimits.from_env(on_gpu=torch.cuda.is_available()))
        result, pieces = _on_device(clip.samples, req, progress)
        result["audio_notes"] = list(clip.notes)
        return result, pieces


@contextlib.contextmanager
def _person_errors() -> Iterator[None]:
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


def _gpu_seconds(samples: np.ndarray, req: CompareRequest, progress: Any = None) -> int:
    """ZeroGPU time to reserve: loading, then 2 x (repeats + 1) runs at >= 10x real time."""
    audio_s = len(samples) / SAMPLE_RATE
    return int(min(600, 60 + 0.2 * (req.repeats + 1) * audio_s))


def _on_device(
    samples: np.ndarray, req: CompareRequest, progress: gr.Progress | None
) -> tuple[dict[str, Any], dict[int, str]]:
    """The GPU part: both decoders, timed, and the text of every token they produced."""

    def report(fraction: float, what: str) -> None:
        if progress is not None:
            progress(fraction, desc=what)

    result = compare.compare(samples, req, progress=report).to_dict()
    main, _, _ = compare.load_pair(req)  # a cache hit: the main's tokenizer names the tokens
    return result, token_pieces(main.processor.tokenizer, _token_ids(result))


if spaces is not None:
    _on_device = spaces.GPU(duration=_gpu_seconds)(_on_device)


def token_pieces(tokenizer: Any, ids: Iterable[int]) -> dict[int, str]:
    """Each token id's text; special and timestamp tokens by their name, "<|endoftext|>"."""
    special = set(tokenizer.all_special_ids)
    pieces: dict[int, str] = {}
    for i in set(ids):
        text = tokenizer.decode([i])
        if i in special or not text or _is_special(text):
            text = tokenizer.convert_ids_to_tokens(i)
            text = text if _is_special(text) else f"<|{text}|>"
        pieces[i] = text
    return pieces


def _token_ids(result: Mapping[str, Any]) -> set[int]:
    spec = result["speculative"]
    ids = set(result["baseline"]["token_ids"]) | set(spec["token_ids"])
    for step in spec["steps"]:
        ids.update(step["drafted"])
        ids.add(step["main_token"])
    return ids


def reference_for(audio: str | None) -> str:
    """The reference text of an example clip, matched by file name; empty for other audio."""
    if not audio:
        return ""
    return {e.path.name: e.reference for e in _examples()}.get(Path(audio).name, "")


def on_main_change(main: str) -> tuple[Any, Any, Any, Any]:
    """Offer the assistants that share the main's tokenizer; fix language and task for
    English-only mains."""
    choices, assistant, english_only, note = main_settings(main)
    if english_only:
        language = gr.update(value="English", interactive=False)
        task = gr.update(value="transcribe", interactive=False)
    else:
        language, task = gr.update(interactive=True), gr.update(interactive=True)
    note_update = gr.update(value=note, visible=bool(note))
    return gr.update(choices=choices, value=assistant), language, task, note_update


def main_settings(main: str | None) -> tuple[list[str], str, bool, str]:
    """(assistant choices, default assistant, English-only?, note) for a main label."""
    if not main:
        return [models.SELF_INT8], models.SELF_INT8, False, ""
    try:
        ckpt = models.resolve(main, role="main")
    except CheckpointError as e:
        return [models.SELF_INT8], models.SELF_INT8, False, str(e)
    choices = models.assistant_choices(ckpt, include_hub=not models.hub_offline())
    note = ""
    if ckpt.english_only:
        note = (
            f"{ckpt.label} is English-only: it always transcribes English, so language and task "
            "are fixed. Pick a multilingual main to choose them."
        )
    return choices, _default_assistant(choices, ckpt), ckpt.english_only, note


def _default_assistant(choices: list[str], main: models.Checkpoint) -> str:
    """self-int8 where it is offered (CPU); on GPU a distil model, else another smaller one."""
    if models.SELF_INT8 in choices:
        return models.SELF_INT8
    others = [c for c in choices if c != main.label]
    distil = [c for c in others if "distil" in c]
    return (distil or others or choices)[0]


def _default_main(labels: list[str]) -> str | None:
    for preferred in ("whisper-base (local)", "openai/whisper-large-v3-turbo"):
        if preferred in labels:
            return preferred
    return labels[0] if labels else None


def _examples() -> list[Example]:
    try:
        return read_manifest(HERE / "examples" / "manifest.tsv")
    except ValueError:
        log.warning("examples/manifest.tsv is missing or broken; the page has no examples")
        return []


# ---------------------------------------------------------------------------------------------
# Rendering the result dict


def render_verdict(result: Mapping[str, Any], pieces: Mapping[int, str]) -> str:
    """The headline: IDENTICAL or MISMATCH, the measured and predicted speed-up, load time."""
    base, spec = result["baseline"], result["speculative"]
    if result["identical"]:
        badge = _badge("IDENTICAL", "#15803d")
        same = (
            f"{badge} The speculative output has the same {len(base['token_ids'])} token ids "
            "as the baseline."
        )
    else:
        same = render_mismatch(result, pieces)
    speedup = result["speedup"]
    faster = "faster" if speedup >= 1 else "slower than the baseline on this run"
    predicted = (
        f"Predicted: <b>{result['predicted_speedup']:.2f}×</b> by Leviathan et al.'s formula, "
        f"from the measured acceptance ({100 * spec['acceptance_rate']:.0f}%), the cost ratio "
        f"c = {result['cost_ratio']:.2f} (one draft token's time over one main step's) and the "
        f"mean γ = {result['mean_gamma']:.1f}. It models the decoding loop only, leaving out "
        "the encoder and Python overhead that both sides pay, so the measured figure usually "
        "sits closer to 1×."
    )
    loaded = (
        f"Models loaded in {result['load_time_s']:.1f} s (not included in timings)"
        if result["load_time_s"] > 0
        else "Models were cached (no load time)"
    )
    setup = " · ".join(
        [
            f"{result['duration_s']:.1f} s of audio",
            html.escape(result["device"]),
            html.escape(result["dtype"]),
            f"engine {html.escape(result['engine'])}",
            loaded,
        ]
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in result.get("audio_notes", []))
    return (
        '<div style="padding: 12px 0">'
        f'<div style="font-size: 1.05em; margin-bottom: 10px">{same}</div>'
        '<div style="display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 16px">'
        f'<span style="font-size: 2.6em; font-weight: 800">{speedup:.2f}×</span>'
        f'<span style="font-size: 1.2em">{faster}</span></div>'
        f'<div style="opacity: 0.85">{predicted}</div>'
        f'<div style="opacity: 0.7; margin-top: 6px; font-size: 0.9em">{setup}</div>'
        + (f'<ul style="margin-top: 6px">{notes}</ul>' if notes else "")
        + "</div>"
    )


def render_mismatch(result: Mapping[str, Any], pieces: Mapping[int, str]) -> str:
    """A MISMATCH box: where the token ids first differ and both texts around that point."""
    base_ids, spec_ids = result["baseline"]["token_ids"], result["speculative"]["token_ids"]
    at = result["first_divergence"]  # may equal the length of the shorter output
    start = max(0, at - CONTEXT_TOKENS)
    common = html.escape(_text(base_ids[start:at], pieces))
    lines = []
    for name, ids in (("Baseline", base_ids), ("Speculative", spec_ids)):
        tail = _text(ids[at : at + CONTEXT_TOKENS], pieces) if at < len(ids) else "(ends here)"
        lines.append(
            f"<div><b>{name}:</b> …{common}"
            f'<mark style="background: #fecaca; color: #7f1d1d">{html.escape(tail)}</mark>…</div>'
        )
    return (
        '<div style="border: 2px solid #dc2626; border-radius: 8px; padding: 10px">'
        f"{_badge('MISMATCH', '#dc2626')} The outputs differ from token {at} on "
        f"({len(base_ids)} baseline tokens, {len(spec_ids)} speculative). Greedy speculative "
        "decoding should reproduce the baseline exactly; in half precision, verifying several "
        "tokens in one pass can round differently and flip a near-tie."
        f'<div style="margin-top: 8px; font-family: monospace">{"".join(lines)}</div></div>'
    )


def render_side(result: Mapping[str, Any], side: str) -> str:
    """One column: transcript, timing (and how it was measured), token and pass counts."""
    r = result[side]
    runs = ", ".join(f"{t:.3f}" for t in r["times_s"])
    rows = [
        ("Generation time", f"{r['time_s']:.3f} s", f"{result['timing']}; runs: {runs} s"),
        ("Tokens generated", str(r["n_tokens"]), ""),
        ("Tokens/s", f"{r['tokens_per_s']:.1f}", ""),
        ("Main forward passes", str(r["n_main_forwards"]), ""),
    ]
    if side == "speculative":
        title, what = "Speculative", f"{result['main']} + {result['assistant']} drafting"
        rows += [
            (
                "Acceptance rate",
                f"{100 * r['acceptance_rate']:.1f}%",
                f"{r['n_accepted']} of {r['n_draft_tokens']} drafted tokens",
            ),
            ("Tokens per main forward", f"{r['tokens_per_main_forward']:.2f}", ""),
            ("Speed-up", f"<b>{result['speedup']:.2f}×</b>", "baseline time / speculative time"),
        ]
    else:
        title, what = "Baseline", f"{result['main']} alone, greedy"
    border = "#dc2626" if not result["identical"] else "rgba(128, 128, 128, 0.35)"
    table = "".join(
        f'<tr><td style="padding: 3px 8px 3px 0; opacity: 0.8">{name}</td>'
        f'<td style="padding: 3px 8px"><b>{value}</b>'
        + (f'<div style="font-size: 0.8em; opacity: 0.7">{html.escape(how)}</div>' if how else "")
        + "</td></tr>"
        for name, value, how in rows
    )
    segments = "".join(
        f'<div><span style="font-family: monospace; opacity: 0.7">'
        f"[{s['start_s']:.2f}–{s['end_s']:.2f}]</span> {html.escape(s['text'])}</div>"
        for s in r.get("segments", [])
    )
    return (
        f'<div style="border: 1px solid {border}; border-radius: 8px; padding: 12px">'
        f'<div style="font-size: 1.3em; font-weight: 700">{title}</div>'
        f'<div style="opacity: 0.7; font-size: 0.9em">{html.escape(what)}</div>'
        f'<p style="font-size: 1.1em; margin: 10px 0">{html.escape(r["text"]) or "<i>(empty)</i>"}'
        "</p>"
        + (f'<div style="margin-bottom: 10px">{segments}</div>' if segments else "")
        + f'<table style="border-collapse: collapse; width: 100%">{table}</table></div>'
    )


def token_origins(token_ids: list[int], steps: list[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """(token id, origin) for each token of the speculative output, origin being one of
    ORIGINS. Steps are laid over the tokens in order; tokens no step explains (the prompt, the
    first token of each window) come from the main model."""
    blocks = [
        [(t, "draft") for t in step["drafted"][: step["n_accepted"]]]
        + [(step["main_token"], _main_token_kind(step))]
        for step in steps
    ]
    out: list[tuple[int, str]] = []
    i = b = 0
    while i < len(token_ids):
        block = blocks[b] if b < len(blocks) else []
        n = 0
        while n < len(block) and i + n < len(token_ids) and token_ids[i + n] == block[n][0]:
            n += 1
        if n:  # a step may stop early at end of text, so a matching prefix is enough
            out.extend(block[:n])
            i, b = i + n, b + 1
        else:
            out.append((token_ids[i], "main"))
            i += 1
    return out


def render_draft_tokens(result: Mapping[str, Any], pieces: Mapping[int, str]) -> str:
    """The speculative transcript coloured by where each token came from, and the step table."""
    spec = result["speculative"]
    steps = spec["steps"]
    if not steps:
        return "<p>No speculative steps were recorded (the assistant never drafted).</p>"
    spans = []
    for i, (token, origin) in enumerate(token_origins(spec["token_ids"], steps)):
        piece = pieces.get(token, f"⟨{token}⟩")
        if _is_special(piece):
            continue  # prompt, end of text and timestamps: not part of the transcript
        title = f"token {i} (id {token}): {ORIGINS[origin][1]}"
        spans.append(
            f'<span title="{html.escape(title)}" style="background: {ORIGINS[origin][0]}; '
            f'border-radius: 3px; padding: 1px 0">{html.escape(piece)}</span>'
        )
    legend = " ".join(
        f'<span style="background: {color}; border-radius: 3px; padding: 1px 6px; '
        f'margin-right: 6px">{label}</span>'
        for color, label in ORIGINS.values()
    )
    rows = []
    for n, step in enumerate(steps[:MAX_STEP_ROWS], start=1):
        drafted, n_acc = step["drafted"], step["n_accepted"]
        cells = [
            _token_chip(t, pieces, "draft" if j < n_acc else None) for j, t in enumerate(drafted)
        ]
        kind = _main_token_kind(step)
        rows.append(
            f'<tr><td style="padding: 2px 8px">{n}</td>'
            f'<td style="padding: 2px 8px">{" ".join(cells) or "—"}</td>'
            f'<td style="padding: 2px 8px">{n_acc}/{len(drafted)}</td>'
            f'<td style="padding: 2px 8px">{_token_chip(step["main_token"], pieces, kind)} '
            f'<span style="opacity: 0.7">{kind}</span></td></tr>'
        )
    more = len(steps) - MAX_STEP_ROWS
    if more > 0:
        rows.append(f'<tr><td colspan="4" style="padding: 2px 8px">… {more} more steps</td></tr>')
    head = "".join(
        f'<th style="text-align: left; padding: 2px 8px">{h}</th>'
        for h in ("Step", "Drafted (rejected struck out)", "Accepted", "Main token")
    )
    return (
        f'<div style="margin-bottom: 8px; font-size: 0.9em">{legend}</div>'
        f'<p style="font-size: 1.1em; line-height: 1.9; white-space: pre-wrap">{"".join(spans)}</p>'
        '<div style="overflow-x: auto"><table style="border-collapse: collapse; font-size: 0.9em">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def markdown_table(result: Mapping[str, Any]) -> str:
    """The run as a Markdown table to paste into a post."""
    spec = result["speculative"]
    header = [
        "Main", "Assistant", "Device", "dtype", "Baseline", "Speculative", "Speed-up",
        "Acceptance", "Identical",
    ]  # fmt: skip
    row = [
        result["main"],
        result["assistant"],
        result["device"],
        result["dtype"],
        f"{result['baseline']['time_s']:.3f} s",
        f"{spec['time_s']:.3f} s",
        f"{result['speedup']:.2f}×",
        f"{100 * spec['acceptance_rate']:.1f}%",
        "yes" if result["identical"] else f"no (from token {result['first_divergence']})",
    ]
    cells = [str(c).replace("|", "\\|") for c in row]
    return "\n".join(
        [
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
            "| " + " | ".join(cells) + " |",
            "",
            f"{result['timing'].capitalize()}; {result['duration_s']:.1f} s of audio; engine "
            f"{result['engine']}; mean γ {result['mean_gamma']:.1f}; predicted speed-up "
            f"{result['predicted_speedup']:.2f}×.",
        ]
    )


def timings_frame(result: Mapping[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run": ["Baseline", "Speculative"],
            "seconds": [result["baseline"]["time_s"], result["speculative"]["time_s"]],
        }
    )


class _JsonFiles:
    """Downloadable JSON files in one private folder, keeping only the newest few (gradio
    copies each into its own cache when it serves it)."""

    def __init__(self, keep: int = 16):
        self._files: deque[Path] = deque()
        self._keep = keep
        self._lock = threading.Lock()
        self._folder: Path | None = None

    def write(self, result: Mapping[str, Any]) -> str:
        with self._lock:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="specwhisper-json-"))
                atexit.register(shutil.rmtree, self._folder, ignore_errors=True)
            with tempfile.NamedTemporaryFile(
                "w", dir=self._folder, prefix="specwhisper-", suffix=".json", delete=False
            ) as file:
                json.dump(result, file, indent=1)
            self._files.append(Path(file.name))
            while len(self._files) > self._keep:
                self._files.popleft().unlink(missing_ok=True)
            return file.name


write_json = _JsonFiles().write


def _main_token_kind(step: Mapping[str, Any]) -> str:
    """Why the main model supplied a step's last token: an ORIGINS key."""
    if not step["drafted"]:
        return "main"
    return "bonus" if step["n_accepted"] == len(step["drafted"]) else "correction"


def _is_special(piece: str) -> bool:
    return bool(_SPECIAL_TOKEN.fullmatch(piece))


def _text(ids: Iterable[int], pieces: Mapping[int, str]) -> str:
    """The transcript text of some tokens, special tokens left out."""
    return "".join(p for p in (pieces.get(i, f"⟨{i}⟩") for i in ids) if not _is_special(p))


def _token_chip(token: int, pieces: Mapping[int, str], origin: str | None) -> str:
    """One token for the step table; origin None marks a rejected draft token."""
    piece = pieces.get(token, f"⟨{token}⟩")
    text = html.escape(repr(piece)[1:-1])  # a newline shows as \\n
    style = "border-radius: 3px; padding: 0 3px; font-family: monospace; "
    if origin is None:
        style += "text-decoration: line-through; opacity: 0.6"
    else:
        style += f"background: {ORIGINS[origin][0]}"
    return f'<span title="id {token}" style="{style}">{text}</span>'


def _badge(text: str, color: str) -> str:
    return (
        f'<span style="background: {color}; color: white; font-weight: 800; padding: 3px 10px; '
        f'border-radius: 6px; letter-spacing: 0.05em">{text}</span>'
    )


# ---------------------------------------------------------------------------------------------
# The page


def build_demo() -> gr.Blocks:
    """The page and its one public endpoint, `compare`; the queue is configured here too."""
    offline = models.hub_offline()
    mains = [c.label for c in models.main_choices(include_hub=not offline)]
    main = _default_main(mains)
    assistants, assistant, english_only, main_note = main_settings(main)
    examples = _examples()

    notice = ""
    if not mains:
        notice = (
            "**No checkpoints are available.** The Hugging Face Hub is not used (offline mode) "
            f"and the models folder `{models.models_dir()}` holds no Whisper checkpoint. "
            "Prepare local weights with `python -m specwhisper.offline`, then restart the app."
        )
    elif offline:
        notice = (
            "**Offline mode:** the Hugging Face Hub is not used, so only the checkpoints in "
            f"`{models.models_dir()}` are listed."
        )

    with gr.Blocks(title="specwhisper", delete_cache=(1800, 3600)) as demo:
        gr.Markdown(HEADER)
        gr.Markdown(notice, visible=bool(notice))
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=300):
                audio = gr.Audio(
                    sources=["upload", "microphone"],
                    type="filepath",
                    label="Audio (WAV, FLAC, MP3, OGG, M4A or WEBM; or record)",
                )
                if examples:
                    gr.Examples(
                        examples=[[str(e.path)] for e in examples],
                        inputs=[audio],
                        example_labels=[_example_label(e) for e in examples],
                        label="Examples (with their reference text)",
                    )
            with gr.Column(scale=1, min_width=300):
                main_box = gr.Dropdown(mains, value=main, label="Main model (the one you want)")
                assistant_box = gr.Dropdown(
                    assistants,
                    value=assistant,
                    label="Assistant (drafts tokens; same tokenizer as the main)",
                )
                with gr.Row(equal_height=False):
                    language = gr.Dropdown(
                        LANGUAGE_CHOICES,
                        value="English" if english_only else AUTO,
                        label="Language",
                        interactive=not english_only,
                        min_width=140,
                    )
                    task = gr.Radio(
                        ["transcribe", "translate"],
                        value="transcribe",
                        label="Task",
                        interactive=not english_only,
                        min_width=140,
                    )
                english_note = gr.Markdown(main_note, visible=bool(main_note))
                with gr.Accordion("Advanced", open=False):
                    gamma = gr.Slider(0, 16, value=5, step=1, label="Draft tokens per step (γ)")
                    schedule = gr.Radio(
                        SCHEDULES,
                        value="adaptive",
                        label="γ schedule",
                        info="adaptive: γ from measured acceptance and costs (Leviathan's "
                        "formula); with the transformers engine, its own confidence-threshold "
                        "drafting. "
                        "heuristic: +2 after a fully accepted draft, -1 otherwise. constant: γ.",
                    )
                    repeats = gr.Slider(1, 10, value=3, step=1, label="Timed repeats per side")
                    dtype = gr.Dropdown(DTYPES, value="auto", label="dtype")
                    engine = gr.Radio(ENGINES, value="specwhisper", label="Speculative engine")
                    timestamps = gr.Checkbox(False, label="Timestamps (segments in both columns)")
                run = gr.Button("Compare", variant="primary", size="lg", interactive=bool(mains))

        verdict = gr.HTML(
            '<p style="opacity: 0.7">Pick or record a clip and press Compare: the verdict, '
            "both transcripts and their timings appear here.</p>"
        )
        reference = gr.Textbox(
            label="Reference (what is said in the example clip)",
            interactive=False,
            lines=2,
            max_lines=8,
        )
        with gr.Row(equal_height=False):
            with gr.Column(min_width=300):
                baseline_html = gr.HTML()
            with gr.Column(min_width=300):
                speculative_html = gr.HTML()
        with gr.Accordion("Draft-token view: who produced each token", open=True):
            draft_html = gr.HTML()
        with gr.Accordion("Results for bloggers", open=False):
            with gr.Row(equal_height=False):
                with gr.Column(min_width=300):
                    table_md = gr.Code(
                        language="markdown",
                        label="Copy as Markdown",
                        buttons=["copy"],
                        wrap_lines=True,
                    )
                    json_file = gr.File(label="Download the JSON")
                with gr.Column(min_width=300):
                    plot = gr.BarPlot(
                        x="run",
                        y="seconds",
                        title="Generation time (median)",
                        y_title="s",
                        y_lim=[0, None],  # bars from zero, or a small gap looks huge
                    )

        # The public API: plain types in hidden components, so `audio` takes handle_file(...)
        # and `language`/`main` take codes or any checkpoint id, not just the listed names.
        with gr.Group(visible=False):
            api_inputs = [
                gr.Audio(type="filepath"),
                gr.Textbox("auto"),
                gr.Textbox("transcribe"),
                gr.Textbox(main or ""),
                gr.Textbox(assistant),
                gr.Number(5, precision=0),
                gr.Textbox("adaptive"),
                gr.Number(3, precision=0),
                gr.Textbox("auto"),
                gr.Checkbox(False),
                gr.Textbox("specwhisper"),
            ]
            api_output = gr.JSON(label="comparison")
            api_button = gr.Button()

        # Timed runs share one slot, so two requests never slow each other down.
        api_button.click(
            run_compare,
            api_inputs,
            api_output,
            api_name="compare",
            concurrency_limit=1,
            concurrency_id="compare",
        )
        run.click(
            on_compare,
            [audio, language, task, main_box, assistant_box]
            + [gamma, schedule, repeats, dtype, timestamps, engine],
            [verdict, baseline_html, speculative_html, draft_html, table_md, json_file, plot],
            api_visibility="private",
            concurrency_limit=1,
            concurrency_id="compare",
        )
        main_box.change(
            on_main_change,
            main_box,
            [assistant_box, language, task, english_note],
            api_visibility="private",
        )
        audio.change(reference_for, audio, reference, api_visibility="private")
    demo.queue(max_size=32, default_concurrency_limit=4)
    return demo


def _example_label(example: Example) -> str:
    duration = f"{example.duration_s:.0f} s" if example.duration_s else ""
    words = example.reference.split()
    preview = " ".join(words[:6]) + (" …" if len(words) > 6 else "")
    return " · ".join(x for x in (example.language, duration, f"“{preview}”") if x)


def launch_options() -> dict[str, Any]:
    """Keyword arguments for demo.launch(): the upload limit (SPECWHISPER_MAX_FILE_MB)."""
    limits = AudioLimits.from_env(on_gpu=torch.cuda.is_available())
    return {"max_file_size": limits.max_file_bytes}


demo = build_demo()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    demo.launch(**launch_options())
