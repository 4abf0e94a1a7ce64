"""specwhisper's web page: one audio, Whisper with and without speculative decoding, side by side.

UI only. The handlers read the audio (specwhisper.audio), run specwhisper.compare and draw its
result. The public API is one endpoint, `compare`, whose answer is `Comparison.to_dict()` plus
the audio notes; the Compare button runs the same code and renders the page from that dict.

Loading, the ZeroGPU way. ZeroGPU runs the `spaces.GPU` function (`_on_device`) in a worker
process forked from this one; what the worker loads dies with it. So models load here, in the
server process, never inside the GPU call: the default pair at import, on the device (ZeroGPU
records the `.to("cuda")`, packs those tensors at launch and copies them to the GPU in each
worker), and any other pair on demand, before the GPU call, into the same cache; every worker
forked after that starts with it. The import-time load only happens when the module runs as
the app (`python app.py`, or on a Space) or SPECWHISPER_PRELOAD=1 asks for it: importing app
in tests loads nothing (see `preload_wanted`).

It does not decode or time models itself.
"""

from __future__ import annotations

import atexit
import contextlib
import html
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from specwhisper import batched, compare, decoding, models
from specwhisper.audio import SAMPLE_RATE, AudioError, AudioLimits, chunks, load_audio
from specwhisper.compare import SAMPLING_NOTE, CompareError, CompareRequest
from specwhisper.examples import Example, read_manifest
from specwhisper.models import CheckpointError
from specwhisper.schedule import SCHEDULES, draft_confidence

try:  # ZeroGPU on Hugging Face Spaces; a no-op decorator everywhere else
    import spaces
except ImportError:  # pragma: no cover - spaces is in requirements.txt
    spaces = None

log = logging.getLogger("specwhisper.app")

HERE = Path(__file__).resolve().parent
AUTO = "Auto-detect"
LANGUAGE_CHOICES = [AUTO, *sorted(name.title() for name in LANGUAGES.values())]
DTYPES = ["auto", "float32", "float16", "bfloat16"]
ENCODER_DTYPES = [("auto (same as dtype)", "auto"), "bfloat16", "float32"]
# What a bf16 encoder did to the baseline over the shared clips
# (BENCHMARKS.md#identity-bf16-encoder): why auto keeps the model's dtype.
BF16_ENCODER_QUALITY = "5 of our 96 test clips changed with whisper-base"
ENGINE_LABELS = {
    "specwhisper": "specwhisper (our loop)",
    "transformers": "transformers (assisted generation)",
}
GENERIC_ERROR = (
    "Something went wrong while comparing; the details are in the server log. "
    "Try again, or try another clip or checkpoint pair."
)
CONTEXT_TOKENS = 8  # tokens shown on each side of a divergence
SEGMENT_COLORS = ("#22c55e", "#3b82f6")  # segments alternate, so neighbours stay apart
MAX_GPU_S = 600  # the longest ZeroGPU call we ask for
TURBO = "openai/whisper-large-v3-turbo"  # the main with no assistant but itself (TURBO_NOTE)
BATCH_SIZES = [1, 2, 4, 8, 16]
MAX_BATCH_ROWS = 32  # 30 s pieces in one batch-mode run, all files together
BATCH_INTRO = """
Several files at once, or one long recording cut into 30 s pieces the way the transformers ASR
pipeline cuts it (5 s of overlap on each side, one piece per row, stitched back together after).
Each row drafts, is verified and keeps its own accepted prefix, so rows advance at their own
rate; a finished row leaves the batch. The speed-up is against plain batched `generate` at the
same batch size, greedy, and every row is checked token for token. The gain fades as the batch
grows: each main pass then does real arithmetic for every row, so checking γ + 1 tokens per row
is no longer almost free (the Distil-Whisper paper measured 2.0x at batch 1, 1.3x at 4 and 0.8x
at 16 on an A100). Uses the main, assistant and language picked above.
"""

HEADER = """
# specwhisper: Whisper, faster, with the very same transcript

**Speculative decoding** pairs the Whisper you want (the *main* model) with a cheap *assistant*.
The assistant drafts γ tokens ahead; the main model checks all of them in a single forward pass,
keeps the longest prefix it agrees with and adds one token of its own: a correction where the
draft went wrong, or a bonus when the whole draft was right. Every kept token is one the main
model would have picked itself, so the greedy output is unchanged, token for token (in float32;
in half precision a near-tie can round the other way, and the page says so); only the number of
slow main passes drops. The demo runs at **batch size 1**, one person waiting for one
transcript: there each main pass is bound by reading the weights, not by arithmetic, so checking
γ + 1 tokens costs about as much as producing one. Pick a clip, press **Compare**, and see both
transcripts, both timings and which tokens the assistant got right.
"""

# Token origins in the draft-token view: (colour, legend label).
ORIGINS = {
    "draft": ("#22c55e", "accepted draft token"),
    "correction": ("#ef4444", "main model: correction after a rejection"),
    "bonus": ("#3b82f6", "main model: bonus after a fully accepted draft"),
    "main": ("#94a3b8", "main model: first token, or a step without a draft"),
}
# Why the main model added a step's last token, for the step table.
STEP_KINDS = {
    "main": "no draft (a window's first token, or drafting paused)",
    "correction": "correction of the first rejected draft token",
    "bonus": "bonus: the whole draft was accepted",
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
    temperature: float = 0.0,
    seed: int = 0,
    fallback: bool = False,
    encoder_dtype: str = "auto",
    progress: gr.Progress = gr.Progress(),  # noqa: B008 - gradio's way to ask for a progress bar
) -> dict[str, Any]:
    """Transcribe an audio file with Whisper alone (greedy) and with an assistant model drafting
    tokens for it (speculative decoding), and compare the two runs: transcripts, token ids,
    timings and whether the outputs are identical.

    Args:
        audio: the audio file (WAV, FLAC, MP3, OGG, M4A or WEBM).
        language: "auto", a Whisper language code ("fr") or its English name ("French").
        task: "transcribe", or "translate" (into English).
        main: the main checkpoint: a listed Hub id or a local folder name ("whisper-base").
        assistant: the assistant checkpoint (same tokenizer as the main), or "self-int8".
        gamma: draft tokens per step, 0 to 64 (the start value for the adaptive schedule).
        gamma_schedule: "adaptive", "constant" or "heuristic".
        repeats: timed repeats per side after one warm-up, 1 to 20.
        dtype: "auto" (float16 on GPU, float32 on CPU), "float32", "float16" or "bfloat16".
        timestamps: segment timestamps in both runs.
        engine: "specwhisper" (our speculative loop) or "transformers" (assisted generation).
        temperature: 0 for greedy (token-identical); above 0, both sides sample (speculative
            sampling: identical in distribution, not token for token).
        seed: the sampling seed; the same seed repeats a run.
        fallback: Whisper's temperature fallback recipe (greedy first, then 0.2 ... 1.0 for
            windows that fail its checks), in both runs; our engine only.
        encoder_dtype: the main's encoder alone, shared by both runs: "auto" (the same as
            dtype) or "bfloat16" (about 3x faster on a CPU with AMX; the decoder still
            verifies in dtype, so the runs stay token for token).
    Returns:
        JSON with `baseline` and `speculative` (text, token ids, time, speed)
        `identical`, `first_divergence`, `speedup`, the pair, device, dtype and audio notes.
    """
    req = _request(
        main=main,
        assistant=assistant,
        language=language,
        task=task,
        gamma=gamma,
        gamma_schedule=gamma_schedule,
        repeats=repeats,
        dtype=dtype,
        timestamps=timestamps,
        engine=engine,
        temperature=temperature,
        seed=seed,
        fallback=fallback,
        encoder_dtype=encoder_dtype,
    )
    return _compare(audio, req, progress).result


def on_compare(
    audio: str | None,
    progress: gr.Progress = gr.Progress(),  # noqa: B008
    **settings: Any,
) -> tuple[Any, ...]:
    """The Compare button: the API's run, drawn into the page. `settings` are the page's fields
    by CompareRequest name (gradio's inputs_kwargs)."""
    req = _request(**settings)
    run = _compare(audio, req, progress)
    result, pieces = run.result, run.pieces
    for note in result["audio_notes"]:
        gr.Warning(note)
    return (
        render_verdict(result, pieces),
        render_side(result, "baseline"),
        render_side(result, "speculative"),
        audio_figure(run.samples, result),
        draft_tokens(result, pieces),
        steps_frame(result, pieces),
        reproduce_snippet(result, req),
        markdown_table(result),
        write_json(result),
        timings_frame(result),
    )


class Run(NamedTuple):
    """One comparison as the handlers see it."""

    result: dict[str, Any]  # the `compare` API's JSON
    pieces: dict[int, str]  # the text of every token id in it
    samples: np.ndarray  # the audio as decoded: float32 mono 16 kHz


def _request(**settings: Any) -> CompareRequest:
    """The page's or the API's settings as a CompareRequest. Gradio hands numbers over as
    floats or strings and cleared fields as None; those become defaults or a sentence."""
    with _person_errors():
        try:
            gamma, repeats = int(settings["gamma"]), int(settings["repeats"])
            seed = int(settings.get("seed") or 0)
        except (TypeError, ValueError):
            raise CompareError(
                "Draft tokens (gamma), repeats and the seed must be whole numbers."
            ) from None
        try:
            temperature = float(settings.get("temperature") or 0.0)
        except (TypeError, ValueError):
            raise CompareError("The temperature must be a number (0: greedy).") from None
        return CompareRequest(
            main=settings["main"] or "",
            assistant=settings["assistant"] or "",
            language=settings["language"] or "auto",
            task=settings["task"] or "transcribe",
            gamma=gamma,
            gamma_schedule=settings["gamma_schedule"] or "adaptive",
            repeats=repeats,
            dtype=settings["dtype"] or "auto",
            timestamps=bool(settings["timestamps"]),
            engine=settings["engine"] or "specwhisper",
            temperature=temperature,
            seed=seed,
            fallback=bool(settings.get("fallback")),
            encoder_dtype=settings.get("encoder_dtype") or "auto",
        )


def _compare(audio: str | None, req: CompareRequest, progress: gr.Progress | None) -> Run:
    """Check the request, read the audio, load the pair here, run the comparison on the device.

    Loading happens in this, the server's process, and not in the GPU call: ZeroGPU runs that in
    a forked worker, where a model loaded would be lost with the worker. Loaded here, the pair
    stays in the cache of the process every worker is forked from.
    """
    with _person_errors():
        compare.check_request(req)  # a wrong checkpoint or language is reported before decoding
        report = _reporter(progress)
        report(0.0, "Reading the audio")
        clip = load_audio(audio, AudioLimits.from_env(on_gpu=torch.cuda.is_available()))
        main, _, load_s = compare.load_pair(req, progress=report)
        result = _on_device(clip.samples, req, progress)
        # what this process loaded, plus what the worker had to load itself (0 when it found
        # the pair in the cache it was forked with)
        result["load_time_s"] = round(load_s + result["load_time_s"], 3)
        result["audio_notes"] = list(clip.notes)
        pieces = token_pieces(main.processor.tokenizer, _token_ids(result))
        return Run(result, pieces, clip.samples)


def _reporter(progress: gr.Progress | None) -> compare.Progress:
    def report(fraction: float, what: str) -> None:
        if progress is not None:
            progress(fraction, desc=what)

    return report


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
    """ZeroGPU time to reserve, loading included: twice the pair's load time as this process
    measured it (a worker forked before that load loads it again; a fresh one only copies it to
    the GPU, which is quicker), 2 x (repeats + 1) runs at 10x real time or faster, and 30 s of
    slack. The cap is the longest call ZeroGPU takes."""
    main, assistant, _ = compare.load_pair(req)  # a cache hit: _compare has just loaded them
    load_s = main.load_time_s + assistant.load_time_s
    audio_s = len(samples) / SAMPLE_RATE
    return int(min(MAX_GPU_S, 30 + 2 * load_s + 0.2 * (req.repeats + 1) * audio_s))


def _on_device(
    samples: np.ndarray, req: CompareRequest, progress: gr.Progress | None
) -> dict[str, Any]:
    """The GPU part: both decoders, timed; the compare API's JSON. Inference only: the pair is
    a cache hit (on ZeroGPU, its tensors were copied to the GPU as the worker started). Only a
    worker forked before the pair was loaded has to load it, and its load time says so."""
    return compare.compare(samples, req, progress=_reporter(progress)).to_dict()


if spaces is not None:
    _on_device = spaces.GPU(duration=_gpu_seconds)(_on_device)


def run_batch(
    files: list[str] | None,
    batch_sizes: list[Any] | None,
    repeats: int,
    main: str,
    assistant: str,
    language: str,
    progress: gr.Progress | None = None,
) -> dict[str, Any]:
    """Batch mode: every file (cut into 30 s pieces) through batched `generate` and our batched
    speculative loop at each batch size; one entry per size (BatchComparison.to_dict), each
    row named by its file."""
    with _person_errors():
        if not files:
            raise CompareError("Add one or more audio files for batch mode.")
        try:
            sizes = sorted({int(size) for size in batch_sizes or []})
        except (TypeError, ValueError):
            raise CompareError("Batch sizes must be whole numbers.") from None
        if not sizes or sizes[0] < 1 or sizes[-1] > 64:
            raise CompareError("Pick at least one batch size, from 1 to 64.")
        req = _request(
            main=main, assistant=assistant, language=language, task="transcribe", gamma=5,
            gamma_schedule="adaptive", repeats=repeats, dtype="auto", timestamps=False,
            engine="specwhisper",
        )  # fmt: skip
        main_ckpt, _ = compare.check_request(req)
        report = _reporter(progress)
        report(0.0, "Reading the audio")
        limits = AudioLimits.from_env(on_gpu=torch.cuda.is_available())
        pieces, names, notes, recordings = [], [], [], []
        for path in files:
            name = Path(path).name
            try:
                clip = load_audio(path, limits)
            except AudioError as e:
                raise CompareError(f"{name}: {e}") from None
            notes += [f"{name}: {note}" for note in clip.notes]
            parts = chunks(clip.samples)
            if len(parts) > 1:  # (name, its rows, their strides): stitched back after decoding
                rows = range(len(pieces), len(pieces) + len(parts))
                recordings.append((name, rows, [stride for _, stride in parts]))
            pieces += [piece for piece, _ in parts]
            names += [name if len(parts) == 1 else f"{name} #{i + 1}" for i in range(len(parts))]
        if len(pieces) > MAX_BATCH_ROWS:
            raise CompareError(
                f"Batch mode takes up to {MAX_BATCH_ROWS} pieces of 30 s; these files make "
                f"{len(pieces)}. Use fewer or shorter files."
            )
        code = None if main_ckpt.english_only else compare.language_code(req.language)
        loaded, _, _ = compare.load_pair(req, progress=report)
        sweep = _on_device_batch(pieces, [code] * len(pieces), sizes, req, progress)
        for entry in sweep:
            for row, name in zip(entry["rows"], names, strict=True):
                row["clip"] = name
        rows = sweep[-1]["rows"]
        stitched = [
            {
                "clip": name,
                **{
                    f"{side}_text": batched.merge_pieces(
                        loaded, [tuple(rows[i][f"{side}_tokens"]) for i in span], strides
                    )
                    for side in ("baseline", "speculative")
                },
                "identical": all(rows[i]["identical"] for i in span),
            }
            for name, span, strides in recordings
        ]
        return {
            "sweep": sweep, "recordings": stitched, "audio_notes": notes, "main": main,
            "assistant": assistant,
        }  # fmt: skip


def _batch_gpu_seconds(
    pieces: list[np.ndarray], languages: list[Any], sizes: list[int], req: CompareRequest,
    progress: Any = None,
) -> int:  # fmt: skip
    """ZeroGPU time for batch mode: as `_gpu_seconds`, once per batch size (two extra baseline
    runs per row check the batch of one)."""
    audio_s = sum(len(p) for p in pieces) / SAMPLE_RATE
    runs = len(sizes) * (2 * (req.repeats + 1) + 1)
    return int(min(MAX_GPU_S, 30 + 0.1 * runs * audio_s))


def _on_device_batch(
    pieces: list[np.ndarray],
    languages: list[str | None],
    sizes: list[int],
    req: CompareRequest,
    progress: gr.Progress | None,
) -> list[dict[str, Any]]:
    """The GPU part of batch mode: inference only, the pair is a cache hit (see _on_device)."""
    main, assistant, _ = compare.load_pair(req)
    report = _reporter(progress)
    sweep = []
    alone = None  # each row's tokens in a batch of one, once size 1 has run
    for k, size in enumerate(sizes):

        def on_batch(i: int, n: int, k: int = k, size: int = size) -> None:
            report((k + i / n) / len(sizes), f"Batch size {size}: batch {i + 1} of {n}")

        result = batched.compare_batches(
            main, assistant, pieces, languages, size, repeats=req.repeats,
            check_batch_of_one=size > 1, batch_of_one=alone, on_batch=on_batch,
        )  # fmt: skip
        sweep.append(result.to_dict())
        if size == 1:
            alone = [row.baseline_tokens for row in result.rows]
    return sweep


if spaces is not None:
    _on_device_batch = spaces.GPU(duration=_batch_gpu_seconds)(_on_device_batch)


def on_batch(
    files: list[str] | None,
    batch_sizes: list[Any] | None,
    repeats: int,
    main: str,
    assistant: str,
    language: str,
    progress: gr.Progress = gr.Progress(),  # noqa: B008
) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """The Compare-in-batches button: the summary, every row, and the speed-up chart."""
    result = run_batch(files, batch_sizes, repeats, main, assistant, language, progress)
    for note in result["audio_notes"]:
        gr.Warning(note)
    return render_batch(result), batch_rows_frame(result), batch_chart_frame(result)


BATCH_COLUMNS = ["Clip", "Batched baseline", "Batched speculative", "Identical"]


def render_batch(result: Mapping[str, Any]) -> str:
    """One line per batch size: both times, the speed-up, acceptance and the row checks."""
    head = (
        "<tr><th>Batch size</th><th>Batched baseline</th><th>Batched speculative</th>"
        "<th>Speed-up</th><th>Acceptance</th><th>Identical rows</th>"
        "<th>Batched baseline = batch of one</th></tr>"
    )
    lines = []
    for e in result["sweep"]:
        same = e["n_identical"] == e["n_rows"]
        badge = _badge(f"{e['n_identical']}/{e['n_rows']}", "#16a34a" if same else "#dc2626")
        lines.append(
            f"<tr><td>{e['batch_size']}</td><td>{e['baseline_s']:.2f} s</td>"
            f"<td>{e['speculative_s']:.2f} s</td><td><b>{e['speedup']:.2f}×</b></td>"
            f"<td>{e['acceptance_rate']:.0%}</td><td>{badge}</td>"
            f"<td>{e['batched_baseline_equals_batch_of_one'] or '–'}</td></tr>"
        )
    pair = html.escape(f"{result['main']} + {result['assistant']}")
    return (
        f"<p><b>{pair}</b>, greedy, medians of the timed repeats after a warm-up.</p>"
        f"<table>{head}{''.join(lines)}</table>"
    )


def batch_rows_frame(result: Mapping[str, Any]) -> pd.DataFrame:
    """Every row of the largest batch size: both transcripts, and whether the tokens match;
    then each recording cut into pieces, stitched back together as the ASR pipeline does."""
    rows = result["sweep"][-1]["rows"]
    rows += [r | {"clip": f"{r['clip']} (pieces stitched)"} for r in result["recordings"]]
    return pd.DataFrame(
        [
            [
                r["clip"],
                r["baseline_text"],
                r["speculative_text"],
                "yes" if r["identical"] else f"no, from token {r.get('first_divergence')}",
            ]
            for r in rows
        ],  # fmt: skip
        columns=BATCH_COLUMNS,
    )


def batch_chart_frame(result: Mapping[str, Any]) -> pd.DataFrame:
    """Speed-up against batch size: this run, and the paper's A100 figures for reference."""
    points = [("this run", e["batch_size"], e["speedup"]) for e in result["sweep"]]
    points += [("Distil-Whisper paper, A100", n, x) for n, x in batched.PAPER_A100.items()]
    return pd.DataFrame(points, columns=["series", "batch size", "speed-up"])


def default_pair() -> tuple[str, str]:
    """The (main, assistant) labels the page starts on, for this hardware and Hub access."""
    return models.default_pair(on_gpu=torch.cuda.is_available(), hub=not models.hub_offline())


def preload_default_pair() -> None:
    """Load the page's default pair now, on the device. On ZeroGPU, tensors moved to CUDA before
    launch are packed to disk at launch and copied to the GPU in every worker, so no visitor
    waits for the default pair (the ZeroGPU way: load at module level, only infer inside)."""
    main, assistant = default_pair()
    try:
        compare.load_pair(CompareRequest(main=main, assistant=assistant))
    except (CheckpointError, CompareError) as e:  # the page still starts, and says why later
        log.warning("The default pair %s + %s was not preloaded: %s", main, assistant, e)


def preload_wanted(module_name: str) -> bool:
    """Whether importing this module loads the default pair: SPECWHISPER_PRELOAD=1 or 0 if set;
    otherwise only when running as the app (`python app.py`, or on a Space, which sets SPACE_ID),
    so that tests and tools importing app pay no load."""
    flag = os.environ.get("SPECWHISPER_PRELOAD", "").strip().lower()
    if flag:
        return flag in ("1", "true", "yes", "on")
    return module_name == "__main__" or bool(os.environ.get("SPACE_ID"))


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
        if step["main_token"] is not None:  # None: the step ended inside its draft
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
    if ckpt.id == TURBO:
        note = models.TURBO_NOTE
    return choices, _default_assistant(choices, ckpt), ckpt.english_only, note


def _default_assistant(choices: list[str], main: models.Checkpoint) -> str:
    """self-int8 where it is offered (CPU); on GPU a distil model, else another one; the main
    itself only when nothing else can draft for it (turbo on a GPU)."""
    if models.SELF_INT8 in choices:
        return models.SELF_INT8
    others = [c for c in choices if c != main.label]
    distil = [c for c in others if "distil" in c]
    return (distil or others or choices)[0]


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
    sampled = result.get("decoding", "greedy") != "greedy"
    if result["identical"]:
        badge = _badge("IDENTICAL", "#15803d")
        same = (
            f"{badge} The speculative output has the same {len(base['token_ids'])} token ids "
            "as the baseline."
        )
    elif sampled and any(t > 0 for t in _temperatures(result)):
        badge = _badge("SAME DISTRIBUTION", "#2563eb")
        same = f"{badge} {html.escape(SAMPLING_NOTE)}"
    else:
        same = render_mismatch(result, pieces)
    if sampled:
        same += f'<div style="margin-top: 6px">{html.escape(decoding_line(result))}</div>'
    speedup = result["speedup"]
    faster = "faster" if speedup >= 1 else "slower than the baseline on this run"
    end_to_end = result["predicted_end_to_end"]
    predicted = (
        f"Predicted: <b>{end_to_end:.2f}×</b> end to end. The decoding loop alone would gain "
        f"{result['predicted_speedup']:.2f}× by Leviathan et al.'s formula, from the measured "
        f"acceptance ({100 * spec['acceptance_rate']:.0f}%), the cost ratio "
        f"c = {result['cost_ratio']:.2f} (one draft token's time over one main step's) and the "
        f"mean γ = {result['mean_gamma']:.1f}; the end-to-end figure adds what both sides pay, "
        "the baseline's measured encoder time and its overhead per main pass."
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
            html.escape(precision_line(result)),
            f"engine {html.escape(result['engine'])}",
            loaded,
        ]
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in result.get("audio_notes", []))
    precision = precision_note(result["dtype"], _encoder_of(result))
    return (
        '<div style="padding: 12px 0">'
        f'<div style="font-size: 1.05em; margin-bottom: 10px">{same}</div>'
        + (f'<div style="margin-bottom: 10px">{html.escape(precision)}</div>' if precision else "")
        + '<div style="display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 16px">'
        f'<span style="font-size: 2.6em; font-weight: 800">{speedup:.2f}×</span>'
        f'<span style="font-size: 1.2em">{faster}</span></div>'
        f'<div style="opacity: 0.85">{predicted}</div>'
        f'<div style="opacity: 0.7; margin-top: 6px; font-size: 0.9em">{setup}</div>'
        + (f'<ul style="margin-top: 6px">{notes}</ul>' if notes else "")
        + "</div>"
    )


def _temperatures(result: Mapping[str, Any]) -> list[float]:
    """The temperatures the speculative side decoded at (one per window with the fallback)."""
    if result.get("decoding") == "sampling":
        return [result["temperature"]]
    return list(result["speculative"].get("window_temperatures", []))


def decoding_line(result: Mapping[str, Any]) -> str:
    """Which decoding ran, and with the fallback where each window ended, on both sides."""
    if result["decoding"] == "sampling":
        return f"Sampling at temperature {result['temperature']:g}, seed {result['seed']}."
    ends = []
    for name in ("baseline", "speculative"):
        temps = result[name].get("window_temperatures", [])
        fell = [f"window {i + 1} at {t:g}" for i, t in enumerate(temps) if t > 0]
        ends.append(f"{name}: " + (", ".join(fell) if fell else "every window stayed greedy"))
    return (
        "Whisper's temperature fallback (greedy windows stay token for token; a window that "
        f"fell back is sampled, seed {result['seed']}). " + "; ".join(ends) + "."
    )


def encoder_info() -> str:
    """The encoder-precision field's help, for the hardware the page runs on."""
    device = models.default_device()
    if device.type == "cuda":
        where = "On this GPU auto runs the whole model in float16 already."
    elif models.bf16_encoder_pays(device):
        where = "This CPU has AMX tiles: in bfloat16 the encoder runs about 3x faster."
    else:
        where = "Without AMX tiles (as here) bfloat16 makes the encoder slower."
    return (
        f"The encoder alone; the decoder stays in dtype, so the columns stay token for token. "
        f"{where} Against float32 it changed a few transcripts ({BF16_ENCODER_QUALITY}), so "
        "auto keeps dtype."
    )


def _encoder_of(result: Mapping[str, Any]) -> str:
    """The main's encoder precision (results made before it was recorded: `dtype`)."""
    return result.get("encoder_dtype") or result["dtype"]


def precision_line(result: Mapping[str, Any]) -> str:
    """What each part ran in, e.g. "encoder bfloat16, decoder float32, draft int8 weights"; the
    plain dtype where the main is all one precision and no int8 draft ran."""
    parts = result.get("precision")
    if not parts or set(parts.values()) == {result["dtype"]}:
        return result["dtype"]
    return ", ".join(f"{part} {dtype}" for part, dtype in parts.items())


def precision_note(dtype: str, encoder_dtype: str | None = None) -> str:
    """What half precision means for "token for token" (empty in float32 throughout)."""
    if dtype == "float32":
        if encoder_dtype in (None, "", "float32"):
            return ""
        return (
            f"The encoder ran in {encoder_dtype} for both columns, and the decoder in float32: "
            "the speculative side verifies in float32, so the columns stay token for token. "
            "Against an all-float32 run the shared encoder output rounds differently, so a "
            f"transcript can change a little ({BF16_ENCODER_QUALITY})."
        )
    return (
        f"Run in {dtype}: half precision can change a token. The speculative side checks γ + 1 "
        "tokens in one pass of the main model, and a matrix product over γ + 1 rows rounds "
        "differently from the baseline's one-row steps, so where two tokens are nearly tied "
        "the other one can win. In float32 the outputs are the same token for token; in half "
        "precision a MISMATCH shows where they part."
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
        "decoding reproduces the baseline exactly in float32; in half precision, verifying "
        "several tokens in one pass can round differently and flip a near-tie."
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
    ORIGINS. The steps are laid over the tokens in order: each adds its accepted draft tokens,
    then the main model's own token unless the step ended inside its draft (`main_token` None,
    on end-of-text or the length limit). Tokens no step explains come from the main model."""
    blocks = [block for block in map(_step_origins, steps) if block]
    out: list[tuple[int, str]] = []
    i = b = 0
    while i < len(token_ids):
        block = blocks[b] if b < len(blocks) else []
        n = 0
        while n < len(block) and i + n < len(token_ids) and token_ids[i + n] == block[n][0]:
            n += 1
        if n:  # the output leaves out end-of-text, so a matching prefix of a step is enough
            out.extend(block[:n])
            i, b = i + n, b + 1
        else:
            out.append((token_ids[i], "main"))
            i += 1
    return out


def _step_origins(step: Mapping[str, Any]) -> list[tuple[int, str]]:
    """The tokens a step added, each with its origin."""
    tokens = [(t, "draft") for t in step["drafted"][: step["n_accepted"]]]
    if step["main_token"] is not None:
        tokens.append((step["main_token"], _main_token_kind(step)))
    return tokens


def draft_tokens(
    result: Mapping[str, Any], pieces: Mapping[int, str]
) -> list[tuple[str, str | None]]:
    """The speculative transcript token by token, each labelled with its origin (the legend of
    gr.HighlightedText). Prompt, end-of-text and timestamp tokens are left out."""
    spec = result["speculative"]
    if not spec["steps"]:
        return [("No speculative steps were recorded (the assistant never drafted).", None)]
    return [
        (piece, ORIGINS[origin][1])
        for token, origin in token_origins(spec["token_ids"], spec["steps"])
        if not _is_special(piece := pieces.get(token, f"⟨{token}⟩"))
    ]


STEP_COLUMNS = ["Step", "Accepted", "Accepted draft", "Rejected draft", "Main token", "Why"]


def steps_frame(result: Mapping[str, Any], pieces: Mapping[int, str]) -> pd.DataFrame:
    """One row per speculative step: what was drafted, what the main model kept, its own token
    and why it added it. Tokens are quoted, so their spaces show."""

    def quoted(ids: Iterable[int]) -> str:
        return " ".join(json.dumps(pieces.get(t, f"⟨{t}⟩"), ensure_ascii=False) for t in ids)

    rows = []
    for n, step in enumerate(result["speculative"]["steps"], start=1):
        drafted, n_accepted, token = step["drafted"], step["n_accepted"], step["main_token"]
        if token is None:
            why = "none: the step ended inside its draft (end of text, or the length limit)"
        else:
            why = STEP_KINDS[_main_token_kind(step)]
        rows.append(
            [
                n,
                f"{n_accepted}/{len(drafted)}",
                quoted(drafted[:n_accepted]),
                quoted(drafted[n_accepted:]),
                "" if token is None else quoted([token]),
                why,
            ]
        )
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def reproduce_snippet(result: Mapping[str, Any], req: CompareRequest) -> str:
    """The few lines of plain transformers that redo this run's speculative side outside the
    Space: the pair, dtype, γ and `generate(..., assistant_model=...)`. Where the run used
    something of specwhisper's (our loop, the self-int8 assistant), it is named with its import."""
    main = models.resolve(result["main"], role="main")
    device = "cuda" if result["device"].startswith("cuda") else "cpu"
    encoder = _encoder_of(result)
    mixed = encoder != result["dtype"]
    head = [
        "import librosa",
        "import torch",
        "from transformers import WhisperForConditionalGeneration, WhisperProcessor",
    ]
    if result["assistant"] == models.SELF_INT8:
        # specwhisper's own: the main's decoder with its Linear layers in int8 (CPU only)
        head[-1] = "from specwhisper import drafters, models"
        body = [
            f"loaded = models.CACHE.get(models.resolve({_quoted(main.id)}), torch.device(device), "
            + ("dtype, encoder_dtype)" if mixed else "dtype)"),
            "main, processor = loaded.model, loaded.processor",
            "assistant = drafters.self_int8(loaded).model  # the main's decoder in int8",
        ]
    else:
        body = [
            f"processor = WhisperProcessor.from_pretrained({_quoted(_source(main))})",
            "main = WhisperForConditionalGeneration.from_pretrained(",
            f"    {_quoted(_source(main))}, dtype=dtype",
            ").to(device)",
        ]
        if mixed:  # the encoder alone in another precision: specwhisper's helper does the casts
            head.append("from specwhisper.models import set_encoder_dtype")
            body.append("set_encoder_dtype(main, encoder_dtype)  # decoder stays in dtype")
        assistant = models.resolve(result["assistant"], role="assistant")
        if assistant.id == main.id and assistant.path == main.path:
            body.append("assistant = main  # the main drafting for itself")
        else:
            kind = "WhisperForConditionalGeneration"
            if assistant.decoder_only:  # a distil decoder reading the main's encoder outputs
                kind = "WhisperForCausalLM"
                head[-1] = head[-1].replace("import ", "import WhisperForCausalLM, ")
            body += [
                f"assistant = {kind}.from_pretrained(",
                f"    {_quoted(_source(assistant))}, dtype=dtype",
                ").to(device)",
            ]
            if mixed and not assistant.decoder_only:  # its own encoder, like the main's
                body.append("set_encoder_dtype(assistant, encoder_dtype)")
    needs = "torch, transformers and librosa"
    if result["assistant"] == models.SELF_INT8 or mixed:
        needs += ", and this repository's specwhisper package"
    lines = [
        f"# The speculative run above, outside the Space; needs {needs}.",
        *head,
        "",
        f'device, dtype = "{device}", torch.{result["dtype"]}',
        *([f"encoder_dtype = torch.{encoder}"] if mixed else []),
        *body,
    ]
    schedule = "heuristic" if req.gamma_schedule == "heuristic" else "constant"
    threshold = 0.4 if req.gamma_schedule == "adaptive" else 0.0
    lines += [
        f"assistant.generation_config.num_assistant_tokens = {req.gamma}  # γ",
        f'assistant.generation_config.num_assistant_tokens_schedule = "{schedule}"',
        f"assistant.generation_config.assistant_confidence_threshold = {threshold}",
        "",
        'audio, _ = librosa.load("your-audio.wav", sr=16_000)',
    ]
    options = []  # English-only mains take no language or task (generate refuses them)
    if not main.english_only and result["language"] != "auto":
        options.append(f"language={_quoted(result['language'])}")
    if not main.english_only and result["task"]:
        options.append(f"task={_quoted(result['task'])}")
    if result["duration_s"] > decoding.WINDOW_S:  # long-form: all frames, and their mask
        lines += [
            "inputs = processor(",
            '    audio, sampling_rate=16_000, return_tensors="pt",',
            '    truncation=False, padding="longest", return_attention_mask=True,',
            ")",
        ]
        options += ["attention_mask=inputs.attention_mask.to(device)", "return_timestamps=True"]
    else:
        lines.append('inputs = processor(audio, sampling_rate=16_000, return_tensors="pt")')
        options += ["return_timestamps=True"] if req.timestamps else []
    if req.fallback:  # Whisper's recipe, as decoding.FALLBACK passes it
        options += [f"{key}={value!r}" for key, value in decoding.FALLBACK.items()]
    elif req.temperature > 0:
        options += ["do_sample=True", f"temperature={req.temperature:g}"]
    if req.fallback or req.temperature > 0:
        lines.append(f"torch.manual_seed({req.seed})  # sampling: the same seed repeats a run")
    if req.fallback:  # transformers' assisted generation cannot run the recipe
        lines.append(
            "# The baseline's call: transformers' assisted generation fails under Whisper's "
            "fallback,\n# so only specwhisper's loop (below) runs it with the assistant."
        )
    lines += [
        "ids = main.generate(",
        "    inputs.input_features.to(device, dtype),",
        *([] if req.fallback else ["    assistant_model=assistant,"]),
        *(f"    {option}," for option in options),
        ")",
        "print(processor.batch_decode(ids, skip_special_tokens=True)[0])",
    ]
    if result["engine"] == "specwhisper":
        lines += [
            "",
            "# This run used specwhisper's own speculative loop instead of generate's assisted",
            "# loop; both keep exactly the main model's greedy tokens (sampling: its"
            " distribution). Ours is",
            "#   from specwhisper.decoding import decode_speculative",
        ]
        if req.gamma_schedule == "adaptive":
            stop = (  # greedy drafts only (the fallback's greedy windows too)
                f", each draft stopping after a token\n# it gives under {draft_confidence():g} "
                "probability"
                if req.temperature == 0
                else ""
            )
            lines.append(
                f"# and its adaptive γ (from the measured acceptance and costs{stop}) has no "
                "transformers setting;\n# above, transformers' own confidence-based drafting."
            )
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _source(ckpt: models.Checkpoint) -> str:
    """What from_pretrained takes for a checkpoint: its Hub id, or a local folder as the app's
    folder spells it (never the server's absolute path)."""
    if ckpt.path is None:
        return ckpt.id
    if ckpt.path.resolve().is_relative_to(HERE):
        return ckpt.path.resolve().relative_to(HERE).as_posix()
    return f"models/{ckpt.path.name}"


def audio_figure(samples: np.ndarray, result: Mapping[str, Any]) -> Figure:
    """The audio as Whisper reads it, a log-mel spectrogram (80 bands, 10 ms hop), with the
    baseline's segments over it (timestamps on, or audio over 30 s) and the 30 s windows."""
    import librosa
    import librosa.display

    mel = librosa.feature.melspectrogram(
        y=samples, sr=SAMPLE_RATE, n_fft=400, hop_length=160, n_mels=80
    )
    figure = Figure(figsize=(10, 3.2), layout="constrained")
    ax = figure.add_subplot()
    librosa.display.specshow(
        librosa.power_to_db(mel, ref=np.max),
        sr=SAMPLE_RATE,
        hop_length=160,
        x_axis="time",
        y_axis="mel",
        cmap="magma",
        ax=ax,
    )
    ax.set_xlabel("time (s)")
    segments = result["baseline"].get("segments", [])
    for i, segment in enumerate(segments):
        ax.axvspan(segment["start_s"], segment["end_s"], ymin=0.9, color=SEGMENT_COLORS[i % 2])
        words = segment["text"].split()
        label = " ".join(words[:4]) + (" …" if len(words) > 4 else "")
        ax.text(segment["start_s"], 0.95, f" {label}", transform=ax.get_xaxis_transform(),
                fontsize=7, color="white", va="center", clip_on=True)  # fmt: skip
    duration_s = len(samples) / SAMPLE_RATE
    for edge_s in np.arange(decoding.WINDOW_S, duration_s, decoding.WINDOW_S):
        ax.axvline(edge_s, color="white", linestyle="--", linewidth=1)
    ax.set_title(
        f"Log-mel spectrogram with the baseline's {len(segments)} segments"
        if segments
        else "Log-mel spectrogram (turn on Timestamps to mark the segments)",
        fontsize=10,
    )
    return figure


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
        result["dtype"]
        + (f" (encoder {enc})" if (enc := _encoder_of(result)) != result["dtype"] else ""),
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
            f"{result['predicted_end_to_end']:.2f}× end to end "
            f"({result['predicted_speedup']:.2f}× for the decoding loop).",
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
    main, assistant = default_pair()
    if main not in mains:  # nothing available: the page says how to get weights
        main = mains[0] if mains else None
    assistants, default_assistant, english_only, main_note = main_settings(main)
    if assistant not in assistants:
        assistant = default_assistant
    examples = _examples()

    notice = ""
    folder = shown_path(models.models_dir())
    if not mains:
        notice = (
            "**No checkpoints are available.** The Hugging Face Hub is not used (offline mode) "
            f"and the models folder {folder} holds no Whisper checkpoint. "
            "Prepare local weights with `python -m specwhisper.offline`, then restart the app."
        )
    elif offline:
        notice = (
            "**Offline mode:** the Hugging Face Hub is not used, so only the checkpoints in "
            f"the models folder {folder} are listed."
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
                main_note_box = gr.Markdown(main_note, visible=bool(main_note))
                with gr.Accordion("Advanced", open=False):
                    gamma = gr.Slider(0, 16, value=5, step=1, label="Draft tokens per step (γ)")
                    schedule = gr.Radio(
                        list(SCHEDULES),
                        value="adaptive",
                        label="γ schedule",
                        info="adaptive: γ from measured acceptance and costs (Leviathan's "
                        "formula), each draft stopping early where the draft is unsure; with the "
                        "transformers engine, its own confidence-threshold drafting. "
                        "heuristic: +2 after a fully accepted draft, -1 otherwise. constant: γ.",
                    )
                    repeats = gr.Slider(1, 10, value=3, step=1, label="Timed repeats per side")
                    dtype = gr.Dropdown(
                        DTYPES,
                        value="auto",
                        label="dtype",
                        info="auto: float16 on GPU, float32 on CPU. Half precision can change "
                        "a token (verifying γ + 1 tokens at once rounds differently).",
                    )
                    encoder_dtype = gr.Dropdown(
                        ENCODER_DTYPES,
                        value="auto",
                        label="Encoder precision (both columns)",
                        info=encoder_info(),
                    )
                    engine = gr.Radio(
                        [(ENGINE_LABELS[e], e) for e in decoding.ENGINES],
                        value="specwhisper",
                        label="Speculative engine",
                        info="transformers' assisted generation with a full Whisper assistant: "
                        "30 s or less, no timestamps (it stops after the first segment there)",
                    )
                    timestamps = gr.Checkbox(False, label="Timestamps (segments in both columns)")
                    with gr.Row():
                        temperature = gr.Slider(
                            0.0, 1.0, value=0.0, step=0.1, label="Temperature",
                            info="0: greedy, token for token. Above 0 both sides sample: the "
                            "same distribution, not the same tokens.",
                        )  # fmt: skip
                        seed = gr.Number(0, precision=0, label="Seed", minimum=0)
                    fallback = gr.Checkbox(
                        False,
                        label="Whisper's temperature fallback (both columns; our engine only)",
                        info="Each window greedy first, then 0.2 … 1.0 while it fails Whisper's "
                        "checks (compression ratio, log-probability, no speech).",
                    )
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
        with gr.Accordion("The audio: what Whisper reads, and the segments", open=False):
            spectrogram = gr.Plot(show_label=False)
        with gr.Accordion("Draft-token view: who produced each token", open=True):
            origins = gr.HighlightedText(
                label="Speculative transcript, token by token",
                color_map={label: color for color, label in ORIGINS.values()},
                show_legend=True,
                show_inline_category=False,
            )
            steps = gr.Dataframe(
                headers=STEP_COLUMNS,
                label="Steps: what the assistant drafted and what the main model kept",
                interactive=False,
                wrap=True,
                max_height=420,
                column_widths=["7%", "9%", "26%", "18%", "14%", "26%"],
            )
        with gr.Accordion("Run it yourself: this run in plain transformers", open=False):
            snippet = gr.Code(language="python", label="Python", buttons=["copy"])
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

        with gr.Accordion(
            "Batch mode: several files, batched baseline vs batched speculative", open=False
        ):
            gr.Markdown(BATCH_INTRO)
            with gr.Row(equal_height=False):
                with gr.Column(min_width=300):
                    batch_files = gr.File(
                        file_count="multiple", file_types=["audio"], label="Audio files"
                    )
                with gr.Column(min_width=300):
                    batch_sizes = gr.CheckboxGroup(
                        BATCH_SIZES, value=[1, 4], label="Batch sizes to compare"
                    )
                    batch_repeats = gr.Slider(1, 5, value=1, step=1, label="Timed repeats")
                    batch_run = gr.Button("Compare in batches", interactive=bool(mains))
            batch_summary = gr.HTML()
            batch_chart = gr.LinePlot(
                x="batch size", y="speed-up", color="series",
                title="Speed-up over the batched baseline", y_lim=[0, None],
            )  # fmt: skip
            batch_table = gr.Dataframe(
                headers=BATCH_COLUMNS, label="Rows (largest batch size)", interactive=False,
                wrap=True, max_height=420,
            )  # fmt: skip

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
                gr.Number(0.0),
                gr.Number(0, precision=0),
                gr.Checkbox(False),
                gr.Textbox("auto"),
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
        form = dict(language=language, task=task, main=main_box, assistant=assistant_box)
        form |= dict(gamma=gamma, gamma_schedule=schedule, repeats=repeats, dtype=dtype)
        form |= dict(timestamps=timestamps, engine=engine)
        form |= dict(temperature=temperature, seed=seed, fallback=fallback)
        form |= dict(encoder_dtype=encoder_dtype)
        run.click(
            on_compare,
            [audio],
            [verdict, baseline_html, speculative_html, spectrogram, origins, steps, snippet]
            + [table_md, json_file, plot],
            inputs_kwargs=form,
            api_visibility="private",
            concurrency_limit=1,
            concurrency_id="compare",
        )
        main_box.change(
            on_main_change,
            main_box,
            [assistant_box, language, task, main_note_box],
            api_visibility="private",
        )
        audio.change(reference_for, audio, reference, api_visibility="private")
        batch_run.click(
            on_batch,
            [batch_files, batch_sizes, batch_repeats, main_box, assistant_box, language],
            [batch_summary, batch_table, batch_chart],
            api_visibility="private",
            concurrency_limit=1,
            concurrency_id="compare",
        )
    demo.queue(max_size=32, default_concurrency_limit=4)
    return demo


def shown_path(folder: Path) -> str:
    """A folder as the page may show it: relative to the app, never the server's absolute
    path; a folder elsewhere is named by its setting (SPECWHISPER_MODELS) and its last part."""
    folder = Path(folder).resolve()
    if folder.is_relative_to(HERE):
        return f"`./{folder.relative_to(HERE).as_posix()}`"
    return f"`…/{folder.name}` (set by SPECWHISPER_MODELS)"


def _example_label(example: Example) -> str:
    duration = f"{example.duration_s:.0f} s" if example.duration_s else ""
    words = example.reference.split()
    preview = " ".join(words[:6]) + (" …" if len(words) > 6 else "")
    return " · ".join(x for x in (example.language, duration, f"“{preview}”") if x)


def launch_options() -> dict[str, Any]:
    """Keyword arguments for demo.launch(): the upload limit (SPECWHISPER_MAX_FILE_MB), and the
    MCP server, so agents can call `compare` as a tool, when gradio's `mcp` extra is installed
    (`gradio[mcp]`; without it gradio refuses to launch with mcp_server=True)."""
    limits = AudioLimits.from_env(on_gpu=torch.cuda.is_available())
    mcp = importlib.util.find_spec("mcp") is not None
    if not mcp:
        log.warning('The MCP server is off: install gradio with its extra, "gradio[mcp]".')
    return {"max_file_size": limits.max_file_bytes, "mcp_server": mcp}


demo = build_demo()
if preload_wanted(__name__):
    preload_default_pair()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    demo.launch(**launch_options())
