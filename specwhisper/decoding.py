"""Baseline and speculative Whisper decoding, returning one DecodeResult type.

Three engines, all greedy and batch size 1:
- `generate`: plain `model.generate(...)`, as a user would call it (the baseline).
- `transformers`: the same call with `assistant_model=...` (transformers' assisted generation).
- `specwhisper`: the same call, with transformers' assisted loop swapped for our own
  `speculative_decode`. Whisper's own `generate` still does everything around it (language
  detection, prompts, logits processors, 30 s windows for long-form audio), so both columns go
  through identical pre- and post-processing; only the token loop differs.

Drafting is kept apart from verification: a drafter proposes tokens through `propose` and is told
what survived through `accept`. The main model verifies every token, so greedy output equals the
baseline's by construction.

This module does not load checkpoints, read audio or time repeats (see models, audio, timing).
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from specwhisper.models import SELF_INT8, Loaded
from specwhisper.timing import timed

ENGINES = ("specwhisper", "transformers")
SCHEDULES = ("adaptive", "constant", "heuristic")
SAMPLE_RATE = 16_000
WINDOW_S = 30.0


@dataclass(frozen=True)
class DecodeOptions:
    """What to decode and how to speculate. Whisper's own defaults apply where None."""

    language: str | None = None  # Whisper code ("en"); None = auto-detect (multilingual mains)
    task: str | None = None  # "transcribe" | "translate"; None for English-only mains
    return_timestamps: bool = False  # segment timestamps; always on for audio over 30 s
    gamma: int = 5  # draft tokens per step (the start value for adaptive/heuristic schedules)
    gamma_schedule: str = "adaptive"  # adaptive (Leviathan cost model), constant, heuristic
    max_gamma: int = 12  # the adaptive schedule never drafts more than this
    engine: str = "specwhisper"  # speculative engine: our loop, or transformers' assisted loop
    max_new_tokens: int | None = None  # per window; None: Whisper's limit (448 minus prompt)


@dataclass(frozen=True)
class DraftStep:
    """One speculative step: what the draft proposed and what the main model kept."""

    drafted: tuple[int, ...]  # proposed token ids (empty when drafting was paused)
    n_accepted: int  # leading drafted tokens the main model agreed with
    main_token: int  # the main model's own token: a correction, or the bonus after a full accept


@dataclass(frozen=True)
class Segment:
    start_s: float
    end_s: float
    text: str


@dataclass(frozen=True)
class DecodeResult:
    """One decoding run. Baseline runs leave the draft fields at zero."""

    text: str  # decoded transcript, special tokens removed
    token_ids: tuple[int, ...]  # generated tokens: no prompt, no end-of-text
    time_s: float  # wall time of the generate call (encoder + decoder), device synced
    n_tokens: int  # len(token_ids): text and timestamp tokens the decoder produced
    n_main_forwards: int  # main decoder forward passes (incl. language detection, if any)
    engine: str  # "generate", "specwhisper" or "transformers"
    n_draft_tokens: int = 0  # tokens proposed by the draft
    n_accepted: int = 0  # proposed tokens the main model accepted
    n_windows: int = 1  # 30 s windows the encoder ran on
    steps: tuple[DraftStep, ...] = ()  # per speculative step, in order
    segments: tuple[Segment, ...] = ()  # with timestamps only
    main_forward_s: float = 0.0  # total time inside main decoder forwards (incl. proj)
    draft_s: float = 0.0  # total time inside the draft
    n_draft_forwards: int = 0  # draft forward passes

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_draft_tokens if self.n_draft_tokens else 0.0

    @property
    def tokens_per_main_forward(self) -> float:
        return self.n_tokens / self.n_main_forwards if self.n_main_forwards else 0.0


# ---------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class Features:
    """Log-mel input for generate, prepared once per audio and shared by every run."""

    input_features: torch.Tensor  # [1, n_mels, frames]
    attention_mask: torch.Tensor | None  # [1, frames], long-form only
    duration_s: float

    @property
    def long_form(self) -> bool:
        return self.duration_s > WINDOW_S


def prepare_features(main: Loaded, samples: np.ndarray) -> Features:
    """Log-mel features on the main's device and dtype; long-form keeps the whole signal."""
    duration_s = len(samples) / SAMPLE_RATE
    kwargs: dict[str, Any] = dict(sampling_rate=SAMPLE_RATE, return_tensors="pt")
    if duration_s > WINDOW_S:
        # Sequential long-form decoding needs every frame and a mask of the real ones.
        kwargs |= dict(truncation=False, padding="longest", return_attention_mask=True)
    out = main.processor(samples, **kwargs)
    features = out.input_features.to(main.device, main.dtype)
    mask = out.get("attention_mask") if duration_s > WINDOW_S else None
    return Features(features, None if mask is None else mask.to(main.device), duration_s)


def generate_kwargs(main: Loaded, features: Features, opts: DecodeOptions) -> dict[str, Any]:
    """The keyword arguments every engine passes to `generate`, identical for all of them."""
    kwargs: dict[str, Any] = dict(do_sample=False, num_beams=1)
    if opts.max_new_tokens is not None:
        kwargs["max_new_tokens"] = opts.max_new_tokens
    if features.attention_mask is not None:
        kwargs["attention_mask"] = features.attention_mask
    if getattr(main.model.generation_config, "is_multilingual", False):
        if opts.language:
            kwargs["language"] = opts.language
        if opts.task:
            kwargs["task"] = opts.task
    timestamps = opts.return_timestamps or features.long_form
    if timestamps:
        kwargs |= dict(return_timestamps=True, return_segments=True)
    return kwargs


# ---------------------------------------------------------------------------------------------
# Counting forward passes (hooks add a few microseconds per call)


class ForwardMeter:
    """Counts and times forward calls of one module while active."""

    def __init__(self, module: torch.nn.Module, device: torch.device):
        self.module, self.device = module, device
        self.n_calls, self.total_s = 0, 0.0
        self._start = 0.0
        self._handles: list[Any] = []

    def __enter__(self) -> ForwardMeter:
        self._handles = [
            self.module.register_forward_pre_hook(self._pre),
            self.module.register_forward_hook(self._post),
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()

    def _pre(self, *_: Any) -> None:
        self.n_calls += 1
        self._start = time.perf_counter()

    def _post(self, *_: Any) -> None:
        self.total_s += time.perf_counter() - self._start


# ---------------------------------------------------------------------------------------------
# Drafters: propose() tokens, accept() what survived


class Drafter(Protocol):
    def begin(self, encoder_hidden: torch.Tensor, cache: Any, features: torch.Tensor) -> None:
        """A new window: reset state. `cache` is the main's cache after its prefill pass."""

    def propose(self, tokens: list[int], n: int) -> list[int]:
        """Greedily continue `tokens` (the whole sequence so far) by n draft tokens."""

    def accept(self, n_valid: int) -> None:
        """Only the first n_valid tokens of the sequence are final; forget the rest."""


class _GreedyDrafter:
    """Shared greedy proposing: subclasses provide `_forward(ids) -> last logits [V]`, and keep
    `n` (tokens in their cache), `max_len` and `suppress` ([V] bool, never proposed)."""

    n: int
    max_len: int
    suppress: torch.Tensor

    def _forward(self, ids: list[int]) -> torch.Tensor:
        raise NotImplementedError

    def propose(self, tokens: list[int], n: int) -> list[int]:
        n = min(n, self.max_len - len(tokens))
        drafted: list[int] = []
        if n <= 0:
            return drafted
        logits = self._forward(tokens[self.n :])  # catch up on tokens the main added
        for _ in range(n):
            token = int(logits.masked_fill(self.suppress, -math.inf).argmax())
            drafted.append(token)
            if len(drafted) < n:
                logits = self._forward([token])
        return drafted


class Int8SelfDrafter(_GreedyDrafter):
    """The self-int8 draft run through a lean forward with a preallocated KV cache.

    The same int8 weights, tanh GELU and dynamic activation quantization as the self-int8
    WhisperForCausalLM that transformers' assisted loop uses (models.build_self_int8), with
    fewer and cheaper tensor ops: the query, key and value projections are one int8 matmul
    (per-channel quantization is per output row, so fusing them changes nothing), the packed
    fbgemm weights are called directly, and no transformers cache objects or masks are built.
    One difference in what it computes: it reuses the main model's fp32 cross-attention
    keys/values (computed once per window by the main's first pass) instead of projecting the
    encoder outputs again through int8 weights.
    """

    def __init__(self, draft: Loaded, suppress: torch.Tensor):
        self.w = _lean_weights(draft.model)
        self.suppress = suppress  # [V] bool: tokens the draft never proposes
        self.max_len = draft.model.config.max_target_positions
        w = self.w
        shape = (len(w.layers), w.n_heads, self.max_len, w.head_dim)
        # [L, H, T_max, Dh]; only positions below n are ever read, and each is written first
        self.k = torch.empty(shape)
        self.v = torch.empty(shape)
        self.cross: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.n = 0  # tokens whose K/V are in the cache
        self.n_forwards = 0

    def begin(self, encoder_hidden: torch.Tensor, cache: Any, features: torch.Tensor) -> None:
        # [H, Dh, S] keys, pre-transposed once per window, and [H, S, Dh] values
        self.cross = [
            (layer.keys[0].float().transpose(-1, -2).contiguous(), layer.values[0].float())
            for layer in cache.cross_attention_cache.layers
        ]
        self.n = 0

    @torch.inference_mode()
    def _forward(self, ids: list[int]) -> torch.Tensor:
        """Feed ids at positions n.. n+len(ids); return last-position logits [V]."""
        w, linear = self.w, torch.ops.quantized.linear_dynamic
        start, t, d = self.n, len(ids), self.w.d_model
        x = w.embed[ids] + w.positions[start : start + t]  # [T, D]
        mask = None
        if t > 1:  # causal within the chunk, everything before it visible
            mask = torch.ones(t, start + t, dtype=torch.bool).tril(start)
        for i, layer in enumerate(w.layers):
            h = F.layer_norm(x, (d,), *layer.norm_self)
            qkv = linear(h, layer.qkv, reduce_range=True)  # [T, 3D], q pre-scaled
            q = self._heads(qkv[:, :d])  # [H, T, Dh]
            self.k[i, :, start : start + t] = self._heads(qkv[:, d : 2 * d])
            self.v[i, :, start : start + t] = self._heads(qkv[:, 2 * d :])
            k, v = self.k[i, :, : start + t], self.v[i, :, : start + t]
            a = _attend(q, k.transpose(-1, -2), v, mask)
            x = x + linear(a.transpose(0, 1).reshape(t, d), layer.out, reduce_range=True)
            h = F.layer_norm(x, (d,), *layer.norm_cross)
            q = self._heads(linear(h, layer.cross_q, reduce_range=True))
            a = _attend(q, *self.cross[i])
            x = x + linear(a.transpose(0, 1).reshape(t, d), layer.cross_out, reduce_range=True)
            h = F.layer_norm(x, (d,), *layer.norm_ffn)
            h = w.activation(linear(h, layer.fc1, reduce_range=True))
            x = x + linear(h, layer.fc2, reduce_range=True)
        self.n += t
        self.n_forwards += 1
        x = F.layer_norm(x[-1:], (d,), *w.norm_final)  # only the last position matters
        return linear(x, w.head, reduce_range=True)[0]  # [V]

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """[T, D] -> [H, T, Dh]"""
        return x.view(x.shape[0], self.w.n_heads, self.w.head_dim).transpose(0, 1)

    def accept(self, n_valid: int) -> None:
        self.n = min(self.n, n_valid)


@dataclass(frozen=True)
class _LeanLayer:
    norm_self: tuple[torch.Tensor, torch.Tensor]  # layer-norm weight, bias
    qkv: Any  # fbgemm packed int8 weights (+ fp32 bias): q, k, v stacked
    out: Any
    norm_cross: tuple[torch.Tensor, torch.Tensor]
    cross_q: Any
    cross_out: Any
    norm_ffn: tuple[torch.Tensor, torch.Tensor]
    fc1: Any
    fc2: Any


@dataclass(frozen=True)
class _LeanWeights:
    layers: tuple[_LeanLayer, ...]
    embed: torch.Tensor  # [V, D]
    positions: torch.Tensor  # [T_max, D]
    norm_final: tuple[torch.Tensor, torch.Tensor]
    head: Any
    activation: Callable[[torch.Tensor], torch.Tensor]
    n_heads: int
    head_dim: int
    d_model: int


def _lean_weights(model: torch.nn.Module) -> _LeanWeights:
    """The self-int8 WhisperForCausalLM's weights, repacked once per model for Int8SelfDrafter."""
    cached = getattr(model, "_specwhisper_lean", None)
    if cached is not None:
        return cached
    decoder = model.model.decoder

    def norm(m: torch.nn.LayerNorm) -> tuple[torch.Tensor, torch.Tensor]:
        return m.weight.detach(), m.bias.detach()

    layers = tuple(
        _LeanLayer(
            norm_self=norm(layer.self_attn_layer_norm),
            qkv=_fused_int8(
                layer.self_attn.q_proj,
                layer.self_attn.k_proj,
                layer.self_attn.v_proj,
                scales=(layer.self_attn.scaling, 1.0, 1.0),
            ),
            out=_fused_int8(layer.self_attn.out_proj),
            norm_cross=norm(layer.encoder_attn_layer_norm),
            cross_q=_fused_int8(layer.encoder_attn.q_proj, scales=(layer.encoder_attn.scaling,)),
            cross_out=_fused_int8(layer.encoder_attn.out_proj),
            norm_ffn=norm(layer.final_layer_norm),
            fc1=_fused_int8(layer.fc1),
            fc2=_fused_int8(layer.fc2),
        )
        for layer in decoder.layers
    )
    config = model.config
    weights = _LeanWeights(
        layers=layers,
        embed=decoder.embed_tokens.weight.detach(),
        positions=decoder.embed_positions.weight.detach(),
        norm_final=norm(decoder.layer_norm),
        head=_fused_int8(model.proj_out),
        activation=decoder.layers[0].activation_fn,
        n_heads=config.decoder_attention_heads,
        head_dim=config.d_model // config.decoder_attention_heads,
        d_model=config.d_model,
    )
    model._specwhisper_lean = weights
    return weights


def _fused_int8(*linears: torch.nn.Module, scales: tuple[float, ...] | None = None) -> Any:
    """One packed fbgemm weight for dynamic-int8 Linear modules that read the same input, stacked
    along their outputs (a missing bias is zeros), each output optionally multiplied by a factor
    (attention's 1/sqrt(head_dim), a power of two for Whisper). Per-channel scales make this
    exact: stacking and scaling only touch per-row scales and biases, never the int8 values."""
    weights, biases = [], []
    for m, factor in zip(linears, scales or (1.0,) * len(linears), strict=True):
        weight, bias = m._weight_bias()  # per-channel qint8 [out, in], fp32 bias or None
        weights.append((weight, factor))
        biases.append(torch.zeros(weight.shape[0]) if bias is None else bias.detach() * factor)
    weight = torch._make_per_channel_quantized_tensor(
        torch.cat([w.int_repr() for w, _ in weights]),
        torch.cat([w.q_per_channel_scales() * f for w, f in weights]),
        torch.cat([w.q_per_channel_zero_points() for w, _ in weights]),
        0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized-tensor deprecation chatter
        return torch.ops.quantized.linear_prepack(weight, torch.cat(biases))


class HFDrafter(_GreedyDrafter):
    """Any transformers Whisper model as a draft: seq2seq with its own encoder, or decoder-only
    (distil) reading the main's encoder outputs. Uses a transformers cache cropped on rejection."""

    def __init__(self, draft: Loaded, suppress: torch.Tensor):
        self.model = draft.model
        self.decoder_only = draft.checkpoint.decoder_only
        self.suppress = suppress.to(draft.device)
        self.device = draft.device
        self.max_len = draft.model.config.max_target_positions
        self.n_forwards = 0
        self.n = 0
        self.cache: Any = None
        self.encoder_hidden: torch.Tensor | None = None

    def begin(self, encoder_hidden: torch.Tensor, cache: Any, features: torch.Tensor) -> None:
        from transformers import DynamicCache, EncoderDecoderCache

        if self.decoder_only:
            self.encoder_hidden = encoder_hidden.to(self.model.dtype)
            self.cache = DynamicCache()
        else:
            with torch.inference_mode():
                encoder = self.model.get_encoder()
                self.encoder_hidden = encoder(features.to(self.model.dtype)).last_hidden_state
            self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        self.n = 0

    @torch.inference_mode()
    def _forward(self, ids: list[int]) -> torch.Tensor:
        ids_t = torch.tensor([ids], device=self.device)
        if self.decoder_only:
            out = self.model(
                input_ids=ids_t,
                encoder_outputs=self.encoder_hidden,
                past_key_values=self.cache,
                use_cache=True,
            )
        else:
            out = self.model(
                decoder_input_ids=ids_t,
                encoder_outputs=(self.encoder_hidden,),
                past_key_values=self.cache,
                use_cache=True,
            )
        self.n += len(ids)
        self.n_forwards += 1
        return out.logits[0, -1].float()

    def accept(self, n_valid: int) -> None:
        if self.n > n_valid:
            _crop(self.cache, n_valid)
            self.n = n_valid


def _attend(
    q: torch.Tensor, kt: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Plain attention: for a few queries it beats the fused CPU kernel's set-up cost.
    q [..., H, T, Dh] (pre-scaled), kt [..., H, Dh, S] (keys transposed), v [..., H, S, Dh]."""
    w = q @ kt  # [..., H, T, S]
    if mask is not None:
        w = w.masked_fill(~mask, -math.inf)
    return w.softmax(dim=-1) @ v  # [..., H, T, Dh]


def _crop(cache: Any, keep: int) -> None:
    """Drop cached positions from `keep` on (transformers 5 crops by a negative count)."""
    extra = cache.get_seq_length() - keep
    if extra > 0:
        cache.crop(-extra)


def make_drafter(draft: Loaded, main: Loaded) -> Drafter:
    vocab = main.model.config.vocab_size
    suppress = torch.zeros(vocab, dtype=torch.bool)
    ids = getattr(main.model.generation_config, "suppress_tokens", None) or []
    suppress[[i for i in ids if i < vocab]] = True
    if draft.checkpoint.id == SELF_INT8:
        return Int8SelfDrafter(draft, suppress)
    return HFDrafter(draft, suppress)


# ---------------------------------------------------------------------------------------------
# Gamma schedules


@dataclass
class GammaSchedule:
    """How many tokens to draft next.

    adaptive: pick gamma maximizing expected tokens per unit of time under Leviathan et al.'s
    model, E[tokens] = (1 - a^(g+1)) / (1 - a), cost = g * t_draft + t_verify(g), with the
    acceptance a and both costs measured as we go. Gamma 0 (no drafting) wins when the draft
    does not pay; a probe every `probe_every` tokens keeps the estimate of `a` fresh.
    """

    kind: str = "adaptive"
    gamma: int = 5
    max_gamma: int = 12
    probe_every: int = 24
    # running estimates (exponential moving averages)
    accepted: float = 4.0  # prior: 4 of 5 draft tokens accepted
    trials: float = 5.0
    t_draft_s: float | None = None  # one draft forward
    t_verify_s: dict[int, float] = field(default_factory=dict)  # by tokens fed to the main
    since_draft: int = 0
    decay: float = 0.9

    def alpha(self) -> float:
        return min(max(self.accepted / max(self.trials, 1e-9), 0.0), 0.995)

    def verify_cost(self, k: int) -> float:
        """Cost of one main pass over k tokens: measured, or linear from the nearest measured."""
        if k in self.t_verify_s:
            return self.t_verify_s[k]
        known = sorted(self.t_verify_s)
        lo = max((x for x in known if x < k), default=None)
        hi = min((x for x in known if x > k), default=None)
        if lo is not None and hi is not None:  # interpolate between measured neighbours
            w = (k - lo) / (hi - lo)
            return (1 - w) * self.t_verify_s[lo] + w * self.t_verify_s[hi]
        near = known[-2:] if hi is None else known[:2]
        if len(near) == 2:  # extrapolate along the measured slope (never downhill)
            slope = max(
                0.0, (self.t_verify_s[near[1]] - self.t_verify_s[near[0]]) / (near[1] - near[0])
            )
        else:  # one point: assume 12% more per token, as measured on CPU for base
            slope = 0.12 * self.t_verify_s[near[0]]
        anchor = near[-1] if hi is None else near[0]
        return self.t_verify_s[anchor] + slope * (k - anchor)

    def next(self) -> int:
        if self.kind != "adaptive" or self.t_draft_s is None or not self.t_verify_s:
            return self.gamma
        a = self.alpha()
        best_g, best_rate = 0, 1.0 / self.verify_cost(1)
        for g in range(1, self.max_gamma + 1):
            expected = (1 - a ** (g + 1)) / (1 - a)
            rate = expected / (g * self.t_draft_s + self.verify_cost(g + 1))
            if rate > best_rate * 1.02:  # prefer the shorter draft unless clearly better
                best_g, best_rate = g, rate
        if best_g == 0 and self.since_draft >= self.probe_every:
            return 2  # a cheap probe, so a changed acceptance can switch drafting back on
        return best_g

    def update(self, n_drafted: int, n_accepted: int, draft_s: float, verify_s: float) -> None:
        k = n_drafted + 1
        old = self.t_verify_s.get(k)
        self.t_verify_s[k] = (
            verify_s if old is None else self.decay * old + (1 - self.decay) * verify_s
        )
        if n_drafted == 0:
            self.since_draft += 1
            return
        self.since_draft = 0
        per_step = draft_s / n_drafted
        self.t_draft_s = (
            per_step
            if self.t_draft_s is None
            else (self.decay * self.t_draft_s + (1 - self.decay) * per_step)
        )
        # Geometric model: each draft token is a trial until the first rejection.
        trials = n_accepted + (1 if n_accepted < n_drafted else 0)
        self.accepted = self.decay * self.accepted + n_accepted
        self.trials = self.decay * self.trials + trials
        if self.kind == "heuristic":  # transformers' rule
            self.gamma = self.gamma + 2 if n_accepted == n_drafted else max(1, self.gamma - 1)


# ---------------------------------------------------------------------------------------------
# Our speculative loop


@dataclass
class LoopStats:
    steps: list[DraftStep] = field(default_factory=list)
    draft_s: float = 0.0
    n_windows: int = 0


def speculative_decode(
    main: torch.nn.Module,
    drafter: Drafter,
    schedule: GammaSchedule,
    stats: LoopStats,
    input_ids: torch.LongTensor,
    logits_processor: Any,
    stopping_criteria: Any,
    generation_config: Any,
    *,
    inputs_tensor: torch.Tensor | None = None,
    **model_kwargs: Any,
) -> Any:
    """Greedy speculative decoding of one window; a drop-in for transformers' assisted loop.

    Called by `generate` with the prompt in `input_ids` [1, T0], the logits processors and
    stopping criteria Whisper built, and the encoder outputs and cache in `model_kwargs`.
    Returns what transformers' loop returns (sequences, or an output object).
    """
    from transformers.generation.utils import GenerateEncoderDecoderOutput

    if input_ids.shape[0] != 1:
        raise ValueError("speculative decoding runs at batch size 1")
    device = input_ids.device
    cache = model_kwargs["past_key_values"]
    encoder_outputs = model_kwargs["encoder_outputs"]
    eos = (
        set(generation_config._eos_token_tensor.tolist())
        if generation_config._eos_token_tensor is not None
        else set()
    )
    max_length = generation_config.max_length
    tokens = input_ids[0].tolist()
    processors = list(logits_processor)
    project = _projection(main)

    def verify(before: list[int], fed: list[int], n_last: int) -> torch.Tensor:
        """Main pass over `fed` (the cache already holds `before`): processed logits of the last
        n_last positions, [n_last, V]. Position i's processors see before + fed[: i + 1]."""
        hidden = main.model.decoder(
            input_ids=torch.tensor([fed], device=device),
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state  # [1, K, D]
        logits = project(hidden[0, -n_last:]).float()  # [n_last, V]
        prefix = torch.tensor([before + fed], device=device)  # [1, T]
        return _process(processors, prefix, logits)

    stats.n_windows += 1
    with torch.inference_mode():
        # 1. Prefill: the main reads the prompt and gives the first token, like the baseline.
        start = time.perf_counter()
        first = int(verify([], tokens, 1)[0].argmax())
        schedule.update(0, 0, 0.0, time.perf_counter() - start)
        drafter.begin(encoder_outputs.last_hidden_state, cache, inputs_tensor)
        tokens.append(first)
        done = first in eos or len(tokens) >= max_length
        while not done:
            # 2. Draft gamma tokens (gamma may be 0: drafting does not pay right now).
            gamma = max(0, min(schedule.next(), max_length - len(tokens) - 1))
            t0 = time.perf_counter()
            drafted = drafter.propose(tokens, gamma) if gamma > 0 else []
            t1 = time.perf_counter()
            # 3. Verify: one main pass over the last token plus the draft -> g+1 logits.
            logits = verify(tokens[:-1], [tokens[-1], *drafted], len(drafted) + 1)  # [g+1, V]
            t2 = time.perf_counter()
            choice = logits.argmax(dim=-1).tolist()  # the main's greedy token at each position
            # 4. Accept rule: the longest prefix where draft == main, then the main's own token.
            n_acc = 0
            while n_acc < len(drafted) and drafted[n_acc] == choice[n_acc]:
                n_acc += 1
            new = drafted[:n_acc] + [choice[n_acc]]
            for j, tok in enumerate(new):  # stop at end of text, as the baseline would
                if tok in eos:
                    new = new[: j + 1]
                    break
            new = new[: max_length - len(tokens)]
            # 5. Roll both caches back to the tokens that survived (the newest is not fed yet).
            _crop(cache, len(tokens) + len(new) - 1)
            drafter.accept(len(tokens) + len(new) - 1)
            stats.steps.append(DraftStep(tuple(drafted), min(n_acc, len(new)), new[-1]))
            stats.draft_s += t1 - t0
            schedule.update(len(drafted), n_acc, t1 - t0, t2 - t1)
            tokens.extend(new)
            done = new[-1] in eos or len(tokens) >= max_length
    sequences = torch.tensor([tokens], device=device)
    if generation_config.return_dict_in_generate:
        return GenerateEncoderDecoderOutput(sequences=sequences, past_key_values=cache)
    return sequences


def _projection(main: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """hidden [K, D] -> logits [K, V]. On CPU, MKL's F.linear against the [V, D] output matrix
    slows down three-fold from one row to several; a [D, V] copy, made once, keeps the
    multi-token verify pass near the one-token cost."""
    weight = main.proj_out.weight
    if weight.device.type != "cpu":
        return main.proj_out
    cached = getattr(main, "_specwhisper_proj_t", None)
    if cached is None or cached[0] is not weight:
        cached = (weight, weight.detach().t().contiguous())
        main._specwhisper_proj_t = cached
    proj_t = cached[1]
    return lambda hidden: hidden @ proj_t


def _process(processors: list[Any], prefix: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Apply generate's logits processors to the logits of the last n positions of `prefix`
    ([1, T] ids, [n, V] logits), as the baseline applies them one step at a time: row i sees
    the prefix up to and including its own position.

    Two of Whisper's processors are applied without the per-row loop, with the same result:
    token suppression does not depend on the prefix (one call for the block), and begin
    suppression only acts on the row whose prefix length is its begin index.
    """
    from transformers.generation.logits_process import (
        SuppressTokensAtBeginLogitsProcessor,
        SuppressTokensLogitsProcessor,
    )

    n = logits.shape[0]
    first = prefix.shape[1] - n + 1  # prefix length seen by row 0
    for p in processors:
        if type(p) is SuppressTokensLogitsProcessor:
            logits = p(prefix, logits)
            continue
        rows = range(n)
        if type(p) is SuppressTokensAtBeginLogitsProcessor:
            rows = [i for i in rows if first + i == p.begin_index]
        for i in rows:
            logits[i] = p(prefix[:, : first + i], logits[i : i + 1])[0]
    return logits


def own_loop(drafter: Drafter, schedule: GammaSchedule, stats: LoopStats) -> Callable[..., Any]:
    """A `custom_generate` callable: `generate` builds everything as for the baseline (greedy
    mode, same logits processors and cache) and hands the token loop to `speculative_decode`."""

    def loop(
        model,
        input_ids,
        logits_processor,
        stopping_criteria,
        generation_config,
        inputs_tensor=None,
        **kwargs,
    ):
        for key in (
            "synced_gpus",
            "streamer",
            "assistant_model",
            "tokenizer",
            "assistant_tokenizer",
        ):
            kwargs.pop(key, None)
        return speculative_decode(
            model,
            drafter,
            schedule,
            stats,
            input_ids,
            logits_processor,
            stopping_criteria,
            generation_config,
            inputs_tensor=inputs_tensor,
            **kwargs,
        )

    return loop


@contextlib.contextmanager
def record_candidates(model: torch.nn.Module, stats: LoopStats) -> Iterator[None]:
    """Record transformers' assisted steps (drafted, accepted, main token) without changing them."""
    original = model._get_candidate_generator

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        generator = original(*args, **kwargs)
        get_candidates, update = generator.get_candidates, generator.update_candidate_strategy
        pending: dict[str, Any] = {}

        def get(input_ids, *a, **k):
            t0 = time.perf_counter()
            candidates, logits = get_candidates(input_ids, *a, **k)
            stats.draft_s += time.perf_counter() - t0
            pending["drafted"] = tuple(candidates[0, input_ids.shape[1] :].tolist())
            return candidates, logits

        def upd(input_ids, scores, num_matches):
            drafted = pending.pop("drafted", ())
            n_acc = int(num_matches)
            stats.steps.append(DraftStep(drafted, n_acc, int(input_ids[0, -1])))
            return update(input_ids, scores, num_matches)

        generator.get_candidates, generator.update_candidate_strategy = get, upd
        stats.n_windows += 1
        return generator

    model._get_candidate_generator = wrapped
    try:
        yield
    finally:
        del model._get_candidate_generator


# ---------------------------------------------------------------------------------------------
# Entry points


def _n_prompt_tokens(ids: list[int], generation_config: Any) -> int:
    """Leading prompt tokens (<|startoftranscript|>, language, task, <|notimestamps|>)."""
    special = {generation_config.decoder_start_token_id, generation_config.no_timestamps_token_id}
    special |= set((getattr(generation_config, "lang_to_id", None) or {}).values())
    special |= set((getattr(generation_config, "task_to_id", None) or {}).values())
    n = 0
    while n < len(ids) and ids[n] in special:
        n += 1
    return n


def _finish(
    main: Loaded, output: Any, seconds: float, engine: str, meter: ForwardMeter, **extra: Any
) -> DecodeResult:
    processor = main.processor
    segments: tuple[Segment, ...] = ()
    if isinstance(output, dict):
        sequences = output["sequences"]
        segments = tuple(
            Segment(
                float(s["start"]),
                float(s["end"]),
                processor.decode(s["tokens"], skip_special_tokens=True).strip(),
            )
            for s in (output.get("segments") or [[]])[0]
        )
    else:
        sequences = output
    config = main.model.generation_config
    ids = [int(t) for t in sequences[0].tolist()]
    # generate returns the prompt and end-of-text on some paths (assisted, short-form) and not on
    # others; keep only the generated tokens so every engine is compared on the same footing.
    ids = ids[_n_prompt_tokens(ids, config) :]
    ends = {config.pad_token_id, config.eos_token_id}
    while ids and ids[-1] in ends:
        ids.pop()
    text = processor.decode(ids, skip_special_tokens=True).strip()
    n_tokens = len(ids)
    return DecodeResult(
        text=text,
        token_ids=tuple(ids),
        time_s=seconds,
        n_tokens=n_tokens,
        n_main_forwards=meter.n_calls,
        engine=engine,
        segments=segments,
        main_forward_s=meter.total_s,
        **extra,
    )


def decode_baseline(main: Loaded, features: Features, opts: DecodeOptions) -> DecodeResult:
    """Plain greedy `generate`, as a user runs it: the reference both columns are held to."""
    kwargs = generate_kwargs(main, features, opts)
    with ForwardMeter(main.model.model.decoder, main.device) as meter, torch.inference_mode():
        encoder = ForwardMeter(main.model.model.encoder, main.device)
        with encoder:
            output, seconds = timed(
                lambda: main.model.generate(features.input_features, **kwargs), main.device
            )
    return _finish(main, output, seconds, "generate", meter, n_windows=encoder.n_calls)


@contextlib.contextmanager
def _assistant_config(model: torch.nn.Module, settings: dict[str, Any]) -> Iterator[None]:
    """Set the assistant's generation config for one call and restore it afterwards: Whisper's
    generate also writes `force_unique_generate_call` into it, which would turn later long-form
    runs of the same model (main as its own assistant) into a single 30 s window."""
    saved = model.generation_config
    model.generation_config = copy.deepcopy(saved)
    for key, value in settings.items():
        setattr(model.generation_config, key, value)
    try:
        yield
    finally:
        model.generation_config = saved


def decode_speculative(
    main: Loaded, draft: Loaded, features: Features, opts: DecodeOptions
) -> DecodeResult:
    """The same `generate` call with a draft, through our loop or transformers' assisted loop."""
    if opts.engine not in ENGINES:
        raise ValueError(f"unknown engine {opts.engine!r}; use one of {ENGINES}")
    if opts.gamma_schedule not in SCHEDULES:
        raise ValueError(f"unknown gamma schedule {opts.gamma_schedule!r}; use one of {SCHEDULES}")
    kwargs = generate_kwargs(main, features, opts)
    stats = LoopStats()
    if opts.engine == "specwhisper":
        schedule = GammaSchedule(opts.gamma_schedule, max(opts.gamma, 0), max(opts.max_gamma, 1))
        drafter = make_drafter(draft, main)
        kwargs["custom_generate"] = own_loop(drafter, schedule, stats)
        context: Any = contextlib.nullcontext()
    else:
        # transformers reads these from the assistant's generation config, not from generate().
        # adaptive: its own dynamic drafting (its defaults for assisted generation): up to gamma
        # tokens, stopping early when the draft's confidence falls under 0.4 (a threshold it
        # re-tunes as it goes when scikit-learn is installed). heuristic: gamma +2 after a fully
        # accepted draft, -1 otherwise. constant: always gamma.
        settings = dict(
            num_assistant_tokens=max(opts.gamma, 1),
            num_assistant_tokens_schedule=(
                "heuristic" if opts.gamma_schedule == "heuristic" else "constant"
            ),
            # 0.0, not None: transformers fills a None with its default, 0.4
            assistant_confidence_threshold=0.4 if opts.gamma_schedule == "adaptive" else 0.0,
        )
        kwargs["assistant_model"] = draft.model
        drafter = None
        context = contextlib.ExitStack()
        context.enter_context(_assistant_config(draft.model, settings))
        context.enter_context(record_candidates(main.model, stats))
    with ForwardMeter(main.model.model.decoder, main.device) as meter, context:
        with torch.inference_mode():
            output, seconds = timed(
                lambda: main.model.generate(features.input_features, **kwargs), main.device
            )
    n_draft = sum(len(s.drafted) for s in stats.steps)
    n_acc = sum(s.n_accepted for s in stats.steps)
    return _finish(
        main,
        output,
        seconds,
        opts.engine,
        meter,
        n_windows=stats.n_windows,
        steps=tuple(stats.steps),
        n_draft_tokens=n_draft,
        n_accepted=n_acc,
        draft_s=stats.draft_s,
        n_draft_forwards=getattr(drafter, "n_forwards", 0),
    )


def first_divergence(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """Index of the first differing token, or None when the sequences are identical."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
