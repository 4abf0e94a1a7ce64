"""How checkpoints load: the device and precisions, the encoder's own precision, and a small LRU
cache of loaded models; a failed load says why in a sentence (with no server path), and empties
the cache only when memory ran out.

It does not decide what is offered (checkpoints) and never trusts remote code: weights load from
safetensors only.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from specwhisper import cancel
from specwhisper.checkpoints import (
    Checkpoint,
    CheckpointError,
    models_dir,
    shown,
)
from specwhisper.hub import cached_snapshot, hub_cache_dir, hub_offline, offline_mode
from specwhisper.timing import has_amx

log = logging.getLogger(__name__)


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
