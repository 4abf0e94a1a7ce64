"""Which checkpoints are offered: the Hub registry, the ones already in the local Hugging Face
cache, local folders in the models folder, which main/assistant pairs share a tokenizer, and
which pair the page starts on (`default_pair`). It names the `self-int8` assistant (the main's
decoder with int8 Linear layers); drafters builds it.

It does not load anything (loading) and never trusts remote code: Hub ids must match a strict
pattern, and local paths stay inside the models folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specwhisper.hub import (
    HUB_ID_PATTERN,
    cached_snapshot,
)

SELF_INT8 = "self-int8"


SELF_INT8_CPU_ONLY = (
    "self-int8 drafts run on the CPU only; on GPU pick a distil or smaller assistant."
)


# Vocabulary families: assisted decoding needs the same token ids on both sides.
FAMILY_V2 = "multilingual (v1/v2 tokenizer, 51865 tokens)"


FAMILY_V3 = "multilingual (v3 tokenizer, 51866 tokens)"


FAMILY_EN = "English-only (51864 tokens)"


_FAMILY_BY_VOCAB = {51865: FAMILY_V2, 51866: FAMILY_V3, 51864: FAMILY_EN}


_ALLOWED_ORGS = ("openai", "distil-whisper")


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
        if HUB_ID_PATTERN.match(name) and name.split("/")[0] in _ALLOWED_ORGS:
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
