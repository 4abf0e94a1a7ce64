"""Checkpoint registry, pair compatibility and cached loading.

Knows which Whisper checkpoints exist (Hub ids, the ones already in the local Hugging Face cache,
and local folders in the models folder), which main/assistant pairs share a tokenizer, which pair
the page starts on (`default_pair`), whether the Hub answers (asked once, at start-up), and
loads them once into a small LRU cache; a failed load says why in a sentence, and empties the
cache only when memory ran out. It names the `self-int8` assistant (the main's decoder with
int8 Linear layers); drafters builds it.

It does not decode, time or touch audio, and it never trusts remote code: weights load from
safetensors only, Hub ids must match a strict pattern, and local paths stay inside the models
folder.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specwhisper import cancel
from specwhisper.timing import has_amx

log = logging.getLogger(__name__)


class TransformersOwnCalls(logging.Filter):
    """Drops the notices transformers 5.23 logs about calls it makes itself inside `generate`,
    which no caller can avoid, so a server log shows what our requests cause:

    - "Passing `generation_config` together with generation-related arguments": Whisper's
      `generate_with_fallback` passes its own generation_config with suppress_tokens and
      begin_suppress_tokens (generation_whisper.py, a workaround its comment dates to PR 48108),
      and assisted generation's candidate generator passes the assistant's with
      max_new_tokens, min_new_tokens and use_cache. The same notice naming other arguments is
      kept: that one a caller can act on.
    - "Both `max_new_tokens` ... and `max_length` ... seem to have been set": the candidate
      generator at every draft step, and any capped run; max_new_tokens wins, as we want.
    """

    OWN_ARGUMENTS = (
        {"suppress_tokens", "begin_suppress_tokens"},
        {"use_cache", "min_new_tokens", "max_new_tokens"},
    )

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Passing `generation_config` together with generation-related"):
            named = set(re.findall(r"'(\w+)'", message.split(")", 1)[0]))
            return not any(named <= own for own in self.OWN_ARGUMENTS)
        return not message.startswith("Both `max_new_tokens`")


# transformers logs both from here; getLogger makes the logger transformers will use.
logging.getLogger("transformers.generation.utils").addFilter(TransformersOwnCalls())

SELF_INT8 = "self-int8"
SELF_INT8_CPU_ONLY = (
    "self-int8 drafts run on the CPU only; on GPU pick a distil or smaller assistant."
)

# Vocabulary families: assisted decoding needs the same token ids on both sides.
FAMILY_V2 = "multilingual (v1/v2 tokenizer, 51865 tokens)"
FAMILY_V3 = "multilingual (v3 tokenizer, 51866 tokens)"
FAMILY_EN = "English-only (51864 tokens)"
_FAMILY_BY_VOCAB = {51865: FAMILY_V2, 51866: FAMILY_V3, 51864: FAMILY_EN}

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_ALLOWED_ORGS = ("openai", "distil-whisper")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")

# A local folder holding this file is a distil-style assistant: a full seq2seq checkpoint, saved
# as the distil-whisper repos are, whose decoder is loaded alone (WhisperForCausalLM) to read
# its teacher's encoder outputs. {"teacher": "<main id or folder name>"}; offline.py writes it.
DISTIL_FILE = "specwhisper-distil.json"


class CheckpointError(ValueError):
    """A checkpoint problem worded for a person (unknown id, incompatible pair, broken folder)."""


@dataclass(frozen=True)
class Checkpoint:
    """What we know about a checkpoint before loading it."""

    id: str  # Hub id, local folder name, or "self-int8"
    family: str  # vocabulary family, see _FAMILY_BY_VOCAB
    decoder_only: bool  # distil assistants: a decoder that reads the main's encoder outputs
    d_model: int  # decoder width; a decoder-only assistant needs the main encoder's width
    n_mels: int  # 80 before large-v3, 128 from large-v3 on
    path: Path | None = None  # local folder, None for Hub ids
    teacher: str | None = None  # for distil assistants: the main they were distilled from

    @property
    def english_only(self) -> bool:
        return self.family == FAMILY_EN

    @property
    def label(self) -> str:
        return f"{self.id} (local)" if self.path is not None else self.id


def _hub(name: str, vocab: int, d_model: int, n_mels: int = 80, **kw: Any) -> Checkpoint:
    return Checkpoint(name, _FAMILY_BY_VOCAB[vocab], False, d_model, n_mels, **kw)


HUB_MAINS: dict[str, Checkpoint] = {
    c.id: c
    for c in [
        _hub("openai/whisper-large-v3", 51866, 1280, 128),
        _hub("openai/whisper-large-v3-turbo", 51866, 1280, 128),
        _hub("openai/whisper-large-v2", 51865, 1280),
        _hub("openai/whisper-medium", 51865, 1024),
        _hub("openai/whisper-small", 51865, 768),
        _hub("openai/whisper-base", 51865, 512),
        _hub("openai/whisper-tiny", 51865, 384),
        _hub("openai/whisper-medium.en", 51864, 1024),
        _hub("openai/whisper-small.en", 51864, 768),
        _hub("openai/whisper-base.en", 51864, 512),
        _hub("openai/whisper-tiny.en", 51864, 384),
    ]
}

_DISTIL = [
    ("distil-whisper/distil-large-v2", 51865, 1280, 80, "openai/whisper-large-v2"),
    ("distil-whisper/distil-large-v3", 51866, 1280, 128, "openai/whisper-large-v3"),
    ("distil-whisper/distil-medium.en", 51864, 1024, 80, "openai/whisper-medium.en"),
    ("distil-whisper/distil-small.en", 51864, 768, 80, "openai/whisper-small.en"),
]
HUB_ASSISTANTS: dict[str, Checkpoint] = {
    **{
        name: Checkpoint(name, _FAMILY_BY_VOCAB[v], True, d, m, teacher=t)
        for name, v, d, m, t in _DISTIL
    },
    **{
        name: HUB_MAINS[name]
        for name in (
            "openai/whisper-tiny",
            "openai/whisper-base",
            "openai/whisper-small",
            "openai/whisper-tiny.en",
            "openai/whisper-base.en",
            "openai/whisper-small.en",
        )
    },
}


def models_dir() -> Path:
    """The local models folder: env SPECWHISPER_MODELS (`~` expanded), default ./models against
    the working directory. The app, the bench and the offline converter all use this one."""
    return Path(os.environ.get("SPECWHISPER_MODELS", "models")).expanduser().resolve()


def shown(folder: Path) -> str:
    """A folder as a message to a visitor may name it: relative to the working directory (the
    app's), never the server's absolute path."""
    try:
        return "./" + folder.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return folder.name


def hub_offline() -> bool:
    """True when the Hub must not be used: offline mode (`offline_mode`), or a Hub that did not
    answer the one check this process makes (`hub_reachable`, asked first at start-up)."""
    return offline_mode() or not hub_reachable()


def offline_mode() -> bool:
    """True when the Hub is switched off (HF_HUB_OFFLINE=1 or SPECWHISPER_OFFLINE=1); then the
    Hub is never asked, not even whether it answers."""
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("SPECWHISPER_OFFLINE", ""))
    return any(f.strip().lower() in ("1", "true", "yes", "on") for f in flags)


# ---------------------------------------------------------------------------------------------
# Whether the Hub answers: asked once, with a short bound

HUB_CHECK_TIMEOUT_S = 3.0  # DNS, connect and the reply together; a Hub that answers takes < 1 s
_hub_answers: dict[str, bool] = {}  # endpoint -> did it answer; the first check's answer stays
_hub_check_lock = threading.Lock()


def hub_endpoint() -> str:
    """The Hub's address as huggingface_hub reads it: HF_ENDPOINT, else https://huggingface.co."""
    return os.environ.get("HF_ENDPOINT", "").strip().rstrip("/") or "https://huggingface.co"


def hub_reachable() -> bool:
    """Whether the Hub's endpoint answered one HTTP request within HUB_CHECK_TIMEOUT_S.

    Decided the first time it is asked (the page's choices, at start-up) and kept for the life
    of the process: without it, an unreachable Hub lists checkpoints that then fail after
    huggingface_hub's retries (about 24 s). Not asked in offline mode (`hub_offline` checks
    that first). A Hub that answers later is used after a restart.
    """
    endpoint = hub_endpoint()
    with _hub_check_lock:
        if endpoint not in _hub_answers:
            answered = _answers(endpoint, HUB_CHECK_TIMEOUT_S)
            _hub_answers[endpoint] = answered
            if not answered:
                log.warning(
                    "The Hugging Face Hub (%s) did not answer within %g s: only local folders "
                    "and Hub checkpoints already in the local cache are offered, loaded "
                    "without it.",
                    endpoint,
                    HUB_CHECK_TIMEOUT_S,
                )
        return _hub_answers[endpoint]


def forget_hub_check() -> None:
    """Ask the Hub again at the next `hub_reachable` (for tests: the app asks once)."""
    with _hub_check_lock:
        _hub_answers.clear()


def _answers(url: str, timeout_s: float) -> bool:
    """Whether an HTTP server at `url` gives any reply but a server error within `timeout_s`.
    The request runs in a daemon thread, so that a name lookup, which no socket timeout
    bounds, cannot hold start-up longer than that either."""
    answered: list[bool] = []

    def ask() -> None:
        try:
            request = urllib.request.Request(url, method="HEAD")
            urllib.request.urlopen(request, timeout=timeout_s).close()
            answered.append(True)
        except urllib.error.HTTPError as e:  # a status is an answer; a 5xx Hub cannot serve
            answered.append(e.code < 500)
        except Exception:  # refused, timed out, no route, no name: not reachable
            answered.append(False)

    thread = threading.Thread(target=ask, name="hub-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(answered and answered[0])


# ---------------------------------------------------------------------------------------------
# The local Hugging Face cache: Hub checkpoints that work without the Hub


def hub_cache_dir() -> Path:
    """The Hugging Face Hub cache folder, read from the environment at each call (as
    huggingface_hub reads it at import): HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else
    $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    folder = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    folder = folder or os.path.join(home, "hub")
    return Path(os.path.expandvars(folder)).expanduser()


@dataclass(frozen=True)
class HubSnapshot:
    """One Hub checkpoint as the local cache holds it."""

    folder: Path  # <cache>/models--org--name/snapshots/<revision>
    revision: str  # the commit hash of that snapshot


def cached_snapshot(repo_id: str) -> HubSnapshot | None:
    """The cached snapshot of a Hub model repo that `refs/main` points at (or the only snapshot
    when no ref was recorded), if it holds a config.json and safetensors weights; else None.

    Reads the cache's folder layout (models--org--name/refs, snapshots/<hash>/...) directly,
    which is cheap enough to call whenever the page lists its choices.
    """
    if not _HUB_ID.match(repo_id):
        return None
    repo = hub_cache_dir() / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / "main"
    try:
        if ref.is_file():
            revision = ref.read_text().strip()
        else:
            found = [p.name for p in (repo / "snapshots").iterdir() if p.is_dir()]
            revision = found[0] if len(found) == 1 else ""
    except OSError:
        return None
    folder = repo / "snapshots" / revision
    if not _COMMIT.match(revision) or not (folder / "config.json").is_file():
        return None
    weights = ("model.safetensors", "model.safetensors.index.json")
    if not any((folder / name).is_file() for name in weights):
        return None
    return HubSnapshot(folder, revision)


def cached_hub_ids() -> dict[str, str]:
    """Registry Hub ids whose checkpoint is in the local Hugging Face cache -> their revision."""
    found = {}
    for name in {**HUB_MAINS, **HUB_ASSISTANTS}:
        snapshot = cached_snapshot(name)
        if snapshot is not None:
            found[name] = snapshot.revision
    return found


def _local_checkpoint(folder: Path) -> Checkpoint:
    """Describe a local folder from its config.json, or explain what is missing.

    The folder is a decoder-only (distil-style) assistant when its config names
    WhisperForCausalLM, or when it holds DISTIL_FILE naming its teacher: distil-whisper saves
    its students as full WhisperForConditionalGeneration checkpoints, so the config alone
    cannot tell a 2-layer student from a main.
    """
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"The checkpoint folder '{folder.name}' has no config.json.")
    if not any(folder.glob("*.safetensors")):
        raise CheckpointError(
            f"The checkpoint folder '{folder.name}' has no .safetensors weights "
            "(only safetensors are loaded)."
        )
    try:
        config = json.loads(config_path.read_text())
        vocab = int(config["vocab_size"])
        d_model = int(config["d_model"])
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"The config.json of '{folder.name}' is not a Whisper config.") from e
    if config.get("model_type") != "whisper":
        raise CheckpointError(f"'{folder.name}' is not a Whisper checkpoint.")
    decoder_only = "WhisperForCausalLM" in (config.get("architectures") or [])
    teacher = None
    if (folder / DISTIL_FILE).is_file():
        try:
            teacher = str(json.loads((folder / DISTIL_FILE).read_text())["teacher"])
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(
                f"The {DISTIL_FILE} of '{folder.name}' does not name a teacher."
            ) from e
        decoder_only = True
    n_mels = int(config.get("num_mel_bins", 80))
    family = _FAMILY_BY_VOCAB.get(vocab, f"custom vocabulary ({vocab} tokens)")
    return Checkpoint(folder.name, family, decoder_only, d_model, n_mels, folder, teacher)


def local_checkpoints(root: Path | None = None) -> dict[str, Checkpoint]:
    """Every loadable Whisper folder directly under the models folder, by folder name."""
    root = root or models_dir()
    found: dict[str, Checkpoint] = {}
    if not root.is_dir():
        return found
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            found[folder.name] = _local_checkpoint(folder)
        except CheckpointError:
            continue  # broken folders are reported when someone picks them, not at listing
    return found


def resolve(name: str, *, role: str = "main") -> Checkpoint:
    """Turn a user's checkpoint string into a Checkpoint, or raise CheckpointError.

    Accepts a Hub id from the registry (or any `openai/` / `distil-whisper/` id), a local folder
    name, or a path that resolves inside the models folder.
    """
    name = (name or "").strip()
    if name.endswith(" (local)"):
        name = name[: -len(" (local)")]
    if not name:
        raise CheckpointError(f"Pick {'an' if role == 'assistant' else 'a'} {role} checkpoint.")
    root = models_dir()
    registry = HUB_MAINS if role == "main" else {**HUB_MAINS, **HUB_ASSISTANTS}
    if name in registry:
        return registry[name]
    path = Path(name).expanduser()
    looks_like_path = path.is_absolute() or name.startswith((".", "~")) or "\\" in name
    if not looks_like_path:
        folder = Path(os.path.normpath(root / name))  # symlinks placed in the folder are fine
        if folder.is_relative_to(root) and folder.is_dir():
            return _local_checkpoint(folder)  # explains a broken folder instead of hiding it
        if _HUB_ID.match(name) and name.split("/")[0] in _ALLOWED_ORGS:
            raise CheckpointError(
                f"'{name}' is not in the list of supported checkpoints; pick one from the list."
            )
        folder = f"a folder in {shown(root)}"
        choices = f", {folder}, or 'self-int8'" if role == "assistant" else f" or {folder}"
        raise CheckpointError(f"Unknown {role} checkpoint '{name}'. Use a listed Hub id{choices}.")
    resolved = Path(os.path.normpath(path if path.is_absolute() else root / path))
    if not resolved.is_relative_to(root):
        raise CheckpointError(
            f"Local checkpoints must be folders inside the models folder ({shown(root)}); "
            f"'{name}' is outside it."
        )
    if resolved.is_dir():
        return _local_checkpoint(resolved)
    raise CheckpointError(f"There is no checkpoint folder '{name}' in the models folder.")


def pair_problem(main: Checkpoint, assistant: str | Checkpoint) -> str | None:
    """Why this assistant cannot draft for this main, or None when the pair works."""
    if isinstance(assistant, str) and assistant.strip() == SELF_INT8:
        return None
    other = assistant if isinstance(assistant, Checkpoint) else resolve(assistant, role="assistant")
    if other.family != main.family:
        return (
            f"{other.label} cannot assist {main.label}: their tokenizers differ "
            f"({other.family} vs {main.family}), so draft tokens would mean different words."
        )
    if other.decoder_only:
        # A distil decoder reads the main's encoder outputs, so it needs that exact encoder.
        # Teachers compare by name without the org, so a student of the local whisper-base
        # folder assists openai/whisper-base too; local mains are taken on trust for Hub
        # students (a folder name says nothing about its weights).
        local_student = other.teacher is not None and "/" not in other.teacher
        if (
            other.teacher is not None
            and (main.path is None or local_student)
            and _stem(other.teacher) != _stem(main.id)
        ):
            return (
                f"{other.label} is a decoder-only assistant distilled from {other.teacher}; "
                f"it reads that model's encoder outputs and cannot assist {main.label}."
            )
        if other.d_model != main.d_model:
            return (
                f"{other.label} is a decoder-only assistant of width {other.d_model}; it cannot "
                f"read the encoder outputs of {main.label} (width {main.d_model})."
            )
    elif other.n_mels != main.n_mels:
        return (
            f"{other.label} expects {other.n_mels} mel bins and {main.label} {main.n_mels}; "
            "they cannot share the same input features."
        )
    return None


def _stem(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _hub_pool(registry: dict[str, Checkpoint], include_hub: bool) -> list[Checkpoint]:
    """The registry with the Hub, or only what the local Hugging Face cache holds without it."""
    if include_hub:
        return list(registry.values())
    cached = cached_hub_ids()
    return [c for name, c in registry.items() if name in cached]


def main_choices(include_hub: bool = True) -> list[Checkpoint]:
    """Mains to offer: local folders first (they work offline), then the Hub registry; without
    the Hub, the registry ids already in the local Hugging Face cache."""
    local = [c for c in local_checkpoints().values() if not c.decoder_only]
    return local + _hub_pool(HUB_MAINS, include_hub)


def assistant_choices(
    main: Checkpoint, include_hub: bool = True, on_gpu: bool | None = None
) -> list[str]:
    """Assistant ids that can draft for `main`, best first: self-int8, then local, then Hub
    (without the Hub: the cached Hub ids).

    self-int8 is CPU only (fbgemm int8 kernels); on GPU it is left out, since no measurement
    here has shown an int8 GPU draft beating the fp16 baseline.
    """
    if on_gpu is None:
        on_gpu = torch.cuda.is_available()
    pool = list(local_checkpoints().values()) + _hub_pool(HUB_ASSISTANTS, include_hub)
    ok = [c.label for c in pool if pair_problem(main, c) is None]
    if main.label not in ok:
        ok.append(main.label)  # the main as its own assistant: every draft token is accepted
    return ok if on_gpu else [SELF_INT8, *ok]


# ---------------------------------------------------------------------------------------------
# The pair the page starts on

# Mains with a real distil assistant, best first. The first is the GPU Space's default and the
# pair its README preloads: large-v3 with distil-large-v3 (README: "Default checkpoints" says why).
DISTIL_PAIRS: tuple[tuple[str, str], ...] = (
    ("openai/whisper-large-v3", "distil-whisper/distil-large-v3"),
    ("openai/whisper-large-v2", "distil-whisper/distil-large-v2"),
    ("openai/whisper-medium.en", "distil-whisper/distil-medium.en"),
    ("openai/whisper-small.en", "distil-whisper/distil-small.en"),
)
CPU_MAIN = "whisper-base"  # the folder `python -m specwhisper.offline` writes
CPU_HUB_MAIN = "openai/whisper-base"  # the same model on the Hub


def default_pair(on_gpu: bool, hub: bool) -> tuple[str, str]:
    """(main, assistant) labels the page starts on, as its choice lists spell them.

    - GPU with the Hub: openai/whisper-large-v3 drafted by distil-whisper/distil-large-v3.
    - GPU without the Hub: the first of DISTIL_PAIRS with both halves in the local Hugging Face
      cache; else the first local or cached main with another assistant that can draft for it
      (a local distil folder, a smaller cached model). When no such assistant exists, the main
      drafts for itself: the only pair left that runs on a GPU (self-int8 is CPU only). It can
      only be slower than the baseline, and it is the one case where a main is its own
      default assistant.
    - CPU: whisper-base drafted by self-int8; the local folder when it is there, else
      openai/whisper-base (from the Hub, or from the cache without it), else the first local
      main.
    - Nothing available (no Hub, no local folder, nothing cached): the ids the Hub would give
      (the first distil pair on GPU, openai/whisper-base + self-int8 on CPU). Loading them then
      says the Hub is unreachable and how to prepare local weights.

    Every pair returned passes pair_problem.
    """
    if not on_gpu:
        local = local_checkpoints()
        if CPU_MAIN in local and not local[CPU_MAIN].decoder_only:
            return local[CPU_MAIN].label, SELF_INT8
        if hub or cached_snapshot(CPU_HUB_MAIN) is not None:
            return CPU_HUB_MAIN, SELF_INT8
        mains = main_choices(include_hub=False)
        return (mains[0].label if mains else CPU_HUB_MAIN), SELF_INT8
    if hub:
        return DISTIL_PAIRS[0]
    cached = cached_hub_ids()
    for main, assistant in DISTIL_PAIRS:
        if main in cached and assistant in cached:
            return main, assistant
    mains = main_choices(include_hub=False)
    for main_ckpt in mains:
        others = assistant_choices(main_ckpt, include_hub=False, on_gpu=True)
        others = [a for a in others if a != main_ckpt.label]
        if others:
            return main_ckpt.label, others[0]
    if mains:
        return mains[0].label, mains[0].label
    return DISTIL_PAIRS[0]


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


# ---------------------------------------------------------------------------------------------
# Loading


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16}
_DTYPES |= {"fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def dtype_name(dtype: torch.dtype | None) -> str:
    """torch.bfloat16 -> "bfloat16", as results and messages name precisions; None -> ""."""
    return str(dtype).removeprefix("torch.") if dtype is not None else ""


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """'auto' means fp16 on GPU and fp32 on CPU (CPU half precision is slow and lossy)."""
    if dtype in (None, "", "auto"):
        return torch.float16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise CheckpointError(f"Unknown dtype '{dtype}'; use auto, float32, float16 or bfloat16.")
    return _DTYPES[dtype]


def resolve_encoder_dtype(choice: str, device: torch.device, dtype: torch.dtype) -> torch.dtype:
    """The encoder's dtype for a model run in `dtype`: 'auto' and 'same' are the model's own
    dtype; 'bfloat16' (or another dtype) runs the encoder alone in it (`set_encoder_dtype`).

    The decoder keeps `dtype`, so both columns share one encoder output and the speculative
    column still verifies in fp32: tokens stay identical by construction. Where the CPU has
    AMX-BF16 tiles (`bf16_encoder_pays`) a bf16 encoder is about 3x faster, but it is not the
    'auto' choice: over the 96 shared clips it changed 5 of whisper-base's transcripts (2 for
    the worse, none for the better; WER 11.60% -> 11.79%: BENCHMARKS), and issue 12 asked for
    no change in quality before it becomes the default."""
    if choice in (None, "", "auto", "same"):
        return dtype
    if choice not in _DTYPES:
        raise CheckpointError(
            f"Unknown encoder precision '{choice}'; use auto, same, float32, float16 or bfloat16."
        )
    return _DTYPES[choice]


def bf16_encoder_pays(device: torch.device) -> bool:
    """Whether a bf16 encoder is faster here: a CPU with AMX-BF16 tiles (base's encoder 0.18 s
    against 0.59 s in fp32 per 30 s window, one thread: BENCHMARKS). Without AMX it is slower
    (0.62x measured on an AVX-512 Xeon with avx512_bf16), and on a GPU the whole model runs in
    half precision."""
    return device.type == "cpu" and has_amx()


def set_encoder_dtype(model: torch.nn.Module, encoder_dtype: torch.dtype) -> None:
    """Run a Whisper model's encoder in `encoder_dtype` and hand its output to the decoder in the
    decoder's dtype: features are cast on the way in, the last hidden states on the way out, so
    callers (generate, our loops, transformers' assisted generation) see an ordinary model.
    Asked for, the encoder's per-layer hidden states and attentions stay in `encoder_dtype`.
    transformers' `model.dtype` (its first parameter's) then reads `encoder_dtype`: callers read
    `Loaded.dtype` instead."""
    encoder = model.get_encoder()
    decoder_dtype = next(p.dtype for p in model.get_decoder().parameters())
    encoder.to(encoder_dtype)

    def cast_in(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple:
        if args:
            args = (args[0].to(encoder_dtype), *args[1:])
        elif kwargs.get("input_features") is not None:
            kwargs["input_features"] = kwargs["input_features"].to(encoder_dtype)
        return args, kwargs

    def cast_out(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
        if isinstance(output, tuple):
            return (output[0].to(decoder_dtype), *output[1:])
        output.last_hidden_state = output.last_hidden_state.to(decoder_dtype)
        return output

    encoder.register_forward_pre_hook(cast_in, with_kwargs=True)
    encoder.register_forward_hook(cast_out, with_kwargs=True)


@dataclass
class Loaded:
    """A checkpoint in memory. `processor` is set for mains; `model` may be an int8 drafter."""

    checkpoint: Checkpoint
    model: Any  # WhisperForConditionalGeneration | WhisperForCausalLM
    processor: Any | None
    load_time_s: float
    device: torch.device
    dtype: torch.dtype  # the decoder's (and the encoder's, unless encoder_dtype says otherwise)
    revision: str | None = None  # Hub commit hash of the snapshot loaded; None for local folders
    encoder_dtype: torch.dtype | None = None  # the encoder's where it differs; None: `dtype`

    @property
    def encoder_precision(self) -> torch.dtype | None:
        """What the encoder runs in; None for a decoder-only assistant, which has none."""
        return None if self.checkpoint.decoder_only else self.encoder_dtype or self.dtype


def _locate(ckpt: Checkpoint) -> tuple[str, str | None]:
    """Where from_pretrained reads `ckpt` (a folder or a Hub id) and the revision known before
    loading. Without the Hub, a Hub id loads from its cached snapshot folder, or is refused in
    a sentence before anything loads."""
    if ckpt.path is not None:
        return str(ckpt.path), None
    if not hub_offline():
        return ckpt.id, None  # the revision is read from the cache once downloaded
    snapshot = cached_snapshot(ckpt.id)
    if snapshot is None:
        why = "offline mode" if offline_mode() else "it did not answer when the app started"
        raise CheckpointError(
            f"{ckpt.id} is on the Hugging Face Hub, which this server does not use ({why}), "
            "and it is not in the server's Hugging Face cache. Pick one of the listed "
            "checkpoints."
        )
    return str(snapshot.folder), snapshot.revision


def _device_map_loading(device: torch.device) -> bool:
    """Load with device_map (transformers' accelerate path: each tensor goes from the file
    straight to the GPU, so a large checkpoint never needs a full copy in CPU memory) on a
    dedicated GPU. Not on the CPU, where loading stays as it was, and not on ZeroGPU
    (SPACES_ZERO_GPU, as `spaces` reads it), whose documented pattern is a plain `.to("cuda")`
    at import, which it records and replays in each GPU worker."""
    zero_gpu = os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")
    return device.type == "cuda" and not zero_gpu


def _load_model(
    ckpt: Checkpoint,
    device: torch.device,
    dtype: torch.dtype,
    encoder_dtype: torch.dtype | None = None,
) -> Loaded:
    """from_pretrained, safetensors only, the encoder then cast to `encoder_dtype` where that
    differs. Raises whatever loading raises (ModelCache.get words it), or CheckpointError before
    loading starts."""
    from transformers import WhisperForCausalLM, WhisperForConditionalGeneration, WhisperProcessor

    source, revision = _locate(ckpt)
    start = time.perf_counter()
    kwargs: dict[str, Any] = dict(dtype=dtype, use_safetensors=True, trust_remote_code=False)
    if source == ckpt.id:
        kwargs["cache_dir"] = str(hub_cache_dir())  # the cache cached_snapshot reads
    if _device_map_loading(device):
        kwargs["device_map"] = str(device)
    cls = WhisperForCausalLM if ckpt.decoder_only else WhisperForConditionalGeneration
    model = cls.from_pretrained(source, **kwargs)
    if "device_map" not in kwargs:
        model = model.to(device)
    model.eval()
    if encoder_dtype is not None:  # ModelCache.get passes None where nothing would change
        set_encoder_dtype(model, encoder_dtype)
    processor = None
    if not ckpt.decoder_only:
        extra = {"cache_dir": kwargs["cache_dir"]} if "cache_dir" in kwargs else {}
        processor = WhisperProcessor.from_pretrained(source, **extra)
    if ckpt.path is None and revision is None:
        snapshot = cached_snapshot(ckpt.id)
        revision = snapshot.revision if snapshot is not None else None
    load_s = time.perf_counter() - start
    return Loaded(ckpt, model, processor, load_s, device, dtype, revision, encoder_dtype)


def _load_failure(what: str, hub: bool, device: torch.device, dtype: torch.dtype, e: Exception):
    """A loading exception as one sentence for a person, with no server path in it. `what`
    names the thing loaded ("the folder 'whisper-base (local)'")."""
    if out_of_memory(e):
        where = "GPU memory" if device.type == "cuda" else "memory"
        precision = dtype_name(dtype)
        return CheckpointError(
            f"There is not enough {where} to load {what} in {precision}. The model cache was "
            "emptied, so the next request starts from free memory. A smaller checkpoint, or "
            "half precision on a GPU, needs less."
        )
    reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    if hub and ("connect" in reason.lower() or "offline" in reason.lower()):
        reason = "the Hugging Face Hub could not be reached"
    return CheckpointError(f"Could not load {what}: {without_paths(reason).rstrip('.')}.")


def out_of_memory(e: BaseException) -> bool:
    """A failure that emptying the model cache can cure."""
    return isinstance(e, (torch.cuda.OutOfMemoryError, MemoryError))


_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s/'\"`]+/)*([^\s/'\"`]+)")


def without_paths(text: str) -> str:
    """`text` (a library's error) with each absolute path cut to its last part, so a message
    never shows where the server keeps its files: the Hugging Face cache is named as such,
    the models folder as `shown` names it."""
    for folder, name in ((hub_cache_dir(), "the Hugging Face cache"), (models_dir(), None)):
        for spelling in {str(folder), str(folder.resolve())}:
            text = text.replace(spelling, name or shown(folder))
    return _ABSOLUTE_PATH.sub(lambda m: m.group(1), text)


class ModelCache:
    """A small LRU of loaded checkpoints, so a request never reloads what an earlier one loaded.

    Keys are (id, folder, device, dtype, encoder dtype); a derived model (the self-int8 draft,
    which has no encoder) is keyed by its main's id, device and dtype. A load that runs out of
    memory empties the whole cache, so the memory a half-loaded model and its neighbours held is
    free for the next request; any other failed load (the Hub unreachable, a broken file) keeps
    what is loaded, since dropping it would cure nothing and cost the next visitor a reload.
    Either way it raises CheckpointError with one sentence. Problems found before loading
    (unknown id, the Hub not used and the checkpoint not cached) leave it alone too. Every
    model it holds stops at its next pass when its run's stop flag is set (specwhisper.cancel).
    """

    def __init__(self, capacity: int = 4):
        self.capacity = capacity
        self._items: OrderedDict[tuple, Loaded] = OrderedDict()
        self._lock = threading.RLock()
        self.total_load_s = 0.0  # seconds spent loading since start, for per-request load times

    def get(
        self,
        ckpt: Checkpoint,
        device: torch.device,
        dtype: torch.dtype,
        encoder_dtype: torch.dtype | None = None,
    ) -> Loaded:
        if ckpt.decoder_only or encoder_dtype == dtype:
            encoder_dtype = None  # one model, whatever the request said of an encoder it lacks
        key = (ckpt.id, str(ckpt.path), str(device), str(dtype), str(encoder_dtype))
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            _locate(ckpt)  # refusals worded before anything loads keep the cache
            where = "folder" if ckpt.path is not None else "Hub checkpoint"
            what, hub = f"the {where} '{ckpt.label}'", ckpt.path is None
            load = lambda: _load_model(ckpt, device, dtype, encoder_dtype)  # noqa: E731
            loaded = self._load(what, hub, device, dtype, load)
            self._put(key, loaded)
            return loaded

    def derived(self, name: str, main: Loaded, build: Callable[[Loaded], Loaded]) -> Loaded:
        """A model built from a loaded main (the self-int8 draft: drafters.self_int8), cached
        under the main's key and dtype, so it is built once per main."""
        ckpt = main.checkpoint
        key = (name, ckpt.id, str(ckpt.path), str(main.device), str(main.dtype))
        with self._lock:
            if key not in self._items:
                what = f"the {name} draft of '{ckpt.label}'"
                build_it = lambda: build(main)  # noqa: E731
                self._put(key, self._load(what, False, main.device, main.dtype, build_it))
            self._items.move_to_end(key)
            return self._items[key]

    def _load(
        self,
        what: str,
        hub: bool,
        device: torch.device,
        dtype: torch.dtype,
        load: Callable[[], Loaded],
    ) -> Loaded:
        try:
            return load()
        except Exception as e:
            if out_of_memory(e):
                self.clear()
            else:
                gc.collect()  # a half-built model's tensors may sit in the traceback's cycles
            raise _load_failure(what, hub, device, dtype, e) from e

    def _put(self, key: tuple, loaded: Loaded) -> None:
        cancel.check_before_passes(loaded.model)  # runs with a stop flag end at the next pass
        self.total_load_s += loaded.load_time_s
        self._items[key] = loaded
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
        gc.collect()  # a failed load's tensors may sit in reference cycles (tracebacks)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


CACHE = ModelCache()
