"""Checkpoint registry, pair compatibility and cached loading.

Knows which Whisper checkpoints exist (Hub ids and local folders in the models folder), which
main/assistant pairs share a tokenizer, and loads them once into a small LRU cache. The
`self-int8` assistant (the main decoder with int8 Linear layers) is built here too.

It does not decode, time or touch audio, and it never trusts remote code: weights load from
safetensors only, Hub ids must match a strict pattern, and local paths stay inside the models
folder.
"""

from __future__ import annotations

import copy
import os
import re
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SELF_INT8 = "self-int8"

# Vocabulary families: assisted decoding needs the same token ids on both sides.
FAMILY_V2 = "multilingual (v1/v2 tokenizer, 51865 tokens)"
FAMILY_V3 = "multilingual (v3 tokenizer, 51866 tokens)"
FAMILY_EN = "English-only (51864 tokens)"
_FAMILY_BY_VOCAB = {51865: FAMILY_V2, 51866: FAMILY_V3, 51864: FAMILY_EN}

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_ALLOWED_ORGS = ("openai", "distil-whisper")


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
    """The local models folder: env SPECWHISPER_MODELS, default ./models."""
    return Path(os.environ.get("SPECWHISPER_MODELS", "models")).resolve()


def hub_offline() -> bool:
    """True when the Hub must not be used (HF_HUB_OFFLINE=1 or SPECWHISPER_OFFLINE=1)."""
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("SPECWHISPER_OFFLINE", ""))
    return any(f.strip().lower() in ("1", "true", "yes", "on") for f in flags)


def _local_checkpoint(folder: Path) -> Checkpoint:
    """Describe a local folder from its config.json, or explain what is missing."""
    import json

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
    n_mels = int(config.get("num_mel_bins", 80))
    family = _FAMILY_BY_VOCAB.get(vocab, f"custom vocabulary ({vocab} tokens)")
    return Checkpoint(folder.name, family, decoder_only, d_model, n_mels, folder)


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
        raise CheckpointError(
            f"Unknown {role} checkpoint '{name}'. Use a listed Hub id, a folder in {root}"
            + (", or 'self-int8'." if role == "assistant" else ".")
        )
    resolved = Path(os.path.normpath(path if path.is_absolute() else root / path))
    if not resolved.is_relative_to(root):
        raise CheckpointError(
            f"Local checkpoints must be folders inside the models folder ({root}); "
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
        if other.teacher is not None and main.path is None and other.teacher != main.id:
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


def main_choices(include_hub: bool = True) -> list[Checkpoint]:
    """Mains to offer: local folders first (they work offline), then the Hub registry."""
    local = [c for c in local_checkpoints().values() if not c.decoder_only]
    return local + (list(HUB_MAINS.values()) if include_hub else [])


def assistant_choices(
    main: Checkpoint, include_hub: bool = True, on_gpu: bool | None = None
) -> list[str]:
    """Assistant ids that can draft for `main`, best first: self-int8, then local, then Hub.

    self-int8 is CPU only (fbgemm int8 kernels); on GPU it is left out, since no measurement
    here has shown an int8 GPU draft beating the fp16 baseline.
    """
    if on_gpu is None:
        on_gpu = torch.cuda.is_available()
    pool = list(local_checkpoints().values())
    if include_hub:
        pool += list(HUB_ASSISTANTS.values())
    ok = [c.label for c in pool if pair_problem(main, c) is None]
    if main.label not in ok:
        ok.append(main.label)  # the main as its own assistant: every draft token is accepted
    return ok if on_gpu else [SELF_INT8, *ok]


# ---------------------------------------------------------------------------------------------
# Loading


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """'auto' means fp16 on GPU and fp32 on CPU (CPU half precision is slow and lossy)."""
    table = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16}
    table |= {"fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype in (None, "", "auto"):
        return torch.float16 if device.type == "cuda" else torch.float32
    if dtype not in table:
        raise CheckpointError(f"Unknown dtype '{dtype}'; use auto, float32, float16 or bfloat16.")
    return table[dtype]


@dataclass
class Loaded:
    """A checkpoint in memory. `processor` is set for mains; `model` may be an int8 drafter."""

    checkpoint: Checkpoint
    model: Any  # WhisperForConditionalGeneration | WhisperForCausalLM
    processor: Any | None
    load_time_s: float
    device: torch.device
    dtype: torch.dtype


def _source(ckpt: Checkpoint) -> str:
    return str(ckpt.path) if ckpt.path is not None else ckpt.id


def _load_model(ckpt: Checkpoint, device: torch.device, dtype: torch.dtype) -> Loaded:
    from transformers import WhisperForCausalLM, WhisperForConditionalGeneration, WhisperProcessor

    if ckpt.path is None and hub_offline():
        raise CheckpointError(
            f"{ckpt.id} is on the Hugging Face Hub, which is unreachable here (offline mode). "
            "Pick a local checkpoint; `python -m specwhisper.offline` prepares some."
        )
    start = time.perf_counter()
    kwargs = dict(dtype=dtype, use_safetensors=True, trust_remote_code=False)
    try:
        cls = WhisperForCausalLM if ckpt.decoder_only else WhisperForConditionalGeneration
        model = cls.from_pretrained(_source(ckpt), **kwargs).to(device).eval()
        processor = None if ckpt.decoder_only else WhisperProcessor.from_pretrained(_source(ckpt))
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        where = "folder" if ckpt.path is not None else "Hub checkpoint"
        reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        if ckpt.path is None and ("connect" in reason.lower() or "offline" in reason.lower()):
            reason = "the Hugging Face Hub could not be reached"
        raise CheckpointError(f"Could not load the {where} '{ckpt.label}': {reason}.") from e
    return Loaded(ckpt, model, processor, time.perf_counter() - start, device, dtype)


def build_self_int8(main: Loaded) -> Loaded:
    """The main's own decoder with every Linear in int8 (per-channel, dynamic activations) and
    the tanh approximation of GELU.

    Returned as a WhisperForCausalLM so transformers' assisted generation can use it as a
    decoder-only assistant that reads the main's encoder outputs, exactly like a distil model.
    CPU only: fbgemm int8 kernels have no CUDA counterpart.
    """
    from transformers import WhisperForCausalLM

    if main.device.type != "cpu":
        raise CheckpointError(
            "self-int8 drafts run on the CPU only; on GPU pick a distil or smaller assistant."
        )
    start = time.perf_counter()
    config = copy.deepcopy(main.model.config)
    config.architectures = ["WhisperForCausalLM"]
    # tanh GELU: an approximation a draft can afford; exact GELU cost ~7x more per call here
    config.activation_function = "gelu_pytorch_tanh"
    draft = WhisperForCausalLM(config).eval()
    draft.model.decoder.load_state_dict(main.model.model.decoder.state_dict())
    draft.proj_out.weight = torch.nn.Parameter(main.model.proj_out.weight.detach().clone())
    draft.float()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization deprecation chatter
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        draft = quantize_dynamic(
            draft, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )
    draft.generation_config = copy.deepcopy(main.model.generation_config)
    ckpt = Checkpoint(SELF_INT8, main.checkpoint.family, True, main.checkpoint.d_model, 0)
    return Loaded(ckpt, draft, None, time.perf_counter() - start, main.device, torch.float32)


class ModelCache:
    """A small LRU of loaded checkpoints, so a request never reloads what an earlier one loaded.

    Keys are (id, device, dtype); the self-int8 draft is keyed by its main. A failed load leaves
    the others untouched.
    """

    def __init__(self, capacity: int = 4):
        self.capacity = capacity
        self._items: OrderedDict[tuple, Loaded] = OrderedDict()
        self._lock = threading.RLock()
        self.total_load_s = 0.0  # seconds spent loading since start, for per-request load times

    def get(self, ckpt: Checkpoint, device: torch.device, dtype: torch.dtype) -> Loaded:
        key = (ckpt.id, str(ckpt.path), str(device), str(dtype))
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            loaded = _load_model(ckpt, device, dtype)
            self._put(key, loaded)
            return loaded

    def self_int8(self, main: Loaded) -> Loaded:
        key = (SELF_INT8, main.checkpoint.id, str(main.checkpoint.path), str(main.device))
        with self._lock:
            if key not in self._items:
                self._put(key, build_self_int8(main))
            self._items.move_to_end(key)
            return self._items[key]

    def _put(self, key: tuple, loaded: Loaded) -> None:
        self.total_load_s += loaded.load_time_s
        self._items[key] = loaded
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


CACHE = ModelCache()
