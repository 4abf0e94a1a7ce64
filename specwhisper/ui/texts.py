"""The page's fixed texts and choice lists: the header, the help under each field, the choices
the form offers. Wording only; the page's structure is in layout.py."""

from __future__ import annotations

import os
from pathlib import Path

from specwhisper import checkpoints, loading

# The Space's root, where app.py, examples/ and models/ live: paths shown on the page are
# relative to it.
APP_DIR = Path(__file__).resolve().parents[2]

AUTO = "Auto-detect"
DTYPES = ["auto", "float32", "float16", "bfloat16"]
ENCODER_DTYPES = [("auto (same as dtype)", "auto"), "bfloat16", "float32"]
ENGINE_LABELS = {
    "specwhisper": "specwhisper (our loop)",
    "transformers": "transformers (assisted generation)",
}
BATCH_SIZES = [1, 2, 4, 8, 16]
# What a bf16 encoder did to the baseline over the shared clips
# (BENCHMARKS.md#identity-bf16-encoder): why auto keeps the model's dtype.
BF16_ENCODER_QUALITY = "5 of our 96 test clips changed with whisper-base"

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

VERDICT_PLACEHOLDER = (
    '<p style="opacity: 0.7">Pick or record a clip and press Compare: the verdict, '
    "both transcripts and their timings appear here.</p>"
)

SCHEDULE_INFO = (
    "adaptive: γ from measured acceptance and costs (Leviathan's formula), each draft stopping "
    "early where the draft is unsure; with the transformers engine, its own "
    "confidence-threshold drafting. heuristic: +2 after a fully accepted draft, -1 otherwise. "
    "constant: γ."
)
DTYPE_INFO = (
    "auto: float16 on GPU, float32 on CPU. Half precision can change a token (verifying γ + 1 "
    "tokens at once rounds differently)."
)
ENGINE_INFO = (
    "transformers' assisted generation with a full Whisper assistant: 30 s or less, no "
    "timestamps (it stops after the first segment there)"
)
LOOP_ALONE_LABEL = "Also time our loop without drafting"
LOOP_ALONE_INFO = (
    "One more side in the same timed rounds: our loop at γ 0, one main pass per token as plain "
    "generate makes. The verdict then splits the speed-up into our loop's own gain and "
    "drafting's (our engine only; about one more baseline run per repeat)."
)
TEMPERATURE_INFO = (
    "0: greedy, token for token. Above 0 both sides sample: the same distribution, not the "
    "same tokens."
)
FALLBACK_INFO = (
    "Each window greedy first, then 0.2 … 1.0 while it fails Whisper's checks (compression "
    "ratio, log-probability, no speech)."
)


def encoder_info() -> str:
    """The encoder-precision field's help, for the hardware the page runs on."""
    device = loading.default_device()
    if device.type == "cuda":
        where = "On this GPU auto runs the whole model in float16 already."
    elif loading.bf16_encoder_pays(device):
        where = "This CPU has AMX tiles: in bfloat16 the encoder runs about 3x faster."
    else:
        where = "Without AMX tiles (as here) bfloat16 makes the encoder slower."
    return (
        f"The encoder alone; the decoder stays in dtype, so the columns stay token for token. "
        f"{where} Against float32 it changed a few transcripts ({BF16_ENCODER_QUALITY}), so "
        "auto keeps dtype."
    )


def models_notice(mains: list[str], offline: bool) -> str:
    """What the page says above the form when the Hub is off, or no checkpoint is there."""
    folder = shown_path(checkpoints.models_dir())
    if not mains:
        return (
            "**No checkpoints are available.** The Hugging Face Hub is not used (offline mode) "
            f"and the models folder {folder} holds no Whisper checkpoint. "
            "Prepare local weights with `python -m specwhisper.offline`, then restart the app."
        )
    if offline:
        return (
            "**Offline mode:** the Hugging Face Hub is not used, so only the checkpoints in "
            f"the models folder {folder} are listed."
        )
    return ""


def shown_path(folder: Path) -> str:
    """A folder as the page may show it: relative to the app, never the server's absolute
    path; a folder elsewhere is named by its setting (SPECWHISPER_MODELS) and its last part."""
    # as written first: ./models may be a link to weights kept elsewhere
    for path in (Path(os.path.abspath(folder)), Path(folder).resolve()):
        if path.is_relative_to(APP_DIR):
            return f"`./{path.relative_to(APP_DIR).as_posix()}`"
    return f"`…/{Path(folder).resolve().name}` (set by SPECWHISPER_MODELS)"


TURBO_NOTE = (
    "openai/whisper-large-v3-turbo is large-v3 with its decoder cut from 32 layers to 4 and "
    "fine-tuned: it is already the fast decoder that speculative decoding tries to get. No "
    "listed assistant can draft for it. The tiny to medium models and distil-large-v2 use the "
    "v1/v2 tokenizer, so their token ids mean other words; distil-large-v3 is a 2-layer decoder "
    "distilled to read large-v3's encoder outputs, and the pair check keeps it to large-v3. "
    "Even where a 2-layer draft fits, it would save at most half of a 4-layer step per accepted "
    "token, before each verify pass is paid. So on a GPU turbo can only draft for itself, which "
    "shows the mechanics (every draft token accepted) but is slower than turbo alone; on the CPU "
    "self-int8 (turbo's own 4 layers in int8) is offered. Expect no speed-up from turbo: pick "
    "large-v3 with distil-large-v3 to see the effect the blog describes."
)
