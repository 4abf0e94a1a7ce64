"""Drafters: what proposes tokens for the main model to verify.

A drafter proposes greedy tokens through `propose` and is told what survived through `accept`;
it never decides what is kept (the loop and the main model do). Two kinds:
- `Int8SelfDrafter`: the main's own decoder with int8 Linear layers, run through a lean forward
  (fused int8 QKV, preallocated KV cache, the main's cross-attention keys/values reused).
  `lean_forward` takes a [B, K] batch, so batch mode's int8 drafter (batched) runs the same one.
- `HFDrafter`: any transformers Whisper model: seq2seq with its own encoder, or a decoder-only
  (distil) model reading the main's encoder outputs.

It does not load checkpoints (see models) and does not verify tokens (see loop).
"""

from __future__ import annotations

import copy
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from specwhisper.models import (
    CACHE,
    SELF_INT8,
    SELF_INT8_CPU_ONLY,
    Checkpoint,
    CheckpointError,
    Loaded,
    ModelCache,
    dtype_name,
)
from specwhisper.timing import has_native_bf16

# process(prefix ids, logits [1, V]) -> processed logits [1, V]: the main's logits processors
# (warpers included when sampling) for the position after `prefix`.
Process = Callable[[list[int], torch.Tensor], torch.Tensor]


class Drafter(Protocol):
    def begin(self, encoder_hidden: torch.Tensor, cache: Any, features: torch.Tensor) -> None:
        """A new window: reset state. `cache` is the main's cache after its prefill pass."""

    def propose(self, tokens: list[int], n: int, stop_below: float = 0.0) -> list[int]:
        """Greedily continue `tokens` (the whole sequence so far) by up to n draft tokens,
        stopping after one the draft gives less than `stop_below` probability."""

    def sample(
        self, tokens: list[int], n: int, process: Process, generator: torch.Generator | None
    ) -> tuple[list[int], torch.Tensor]:
        """Continue `tokens` by up to n tokens sampled from q, the draft's distribution after
        `process` (the main's logits processors and warpers); also return q's rows [n, V]."""

    def accept(self, n_valid: int) -> None:
        """Only the first n_valid tokens of the sequence are final; forget the rest."""


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token drawn from `probs` ([V], non-negative, any positive total) by the inverse CDF
    of one uniform number: the same distribution as `torch.multinomial`, at a fraction of its
    cost over Whisper's 51,865 tokens (about 4 ms a draw on this project's CPU, paid per draft
    token). A zero-probability token is never drawn: `right=True` skips the CDF's flat runs."""
    cdf = probs.double().cumsum(0)
    u = torch.rand((), generator=generator, device=probs.device, dtype=torch.float64) * cdf[-1]
    i = int(torch.searchsorted(cdf, u, right=True))
    if i >= probs.shape[0]:  # u rounded up to the total: the last token with any mass
        i = int(torch.nonzero(probs)[-1])
    return i


def probability(logits: torch.Tensor, token: int) -> float:
    """softmax(logits)[token] for logits [V], without the [V] probabilities."""
    logits = logits.float()
    return math.exp(float(logits[token] - torch.logsumexp(logits, 0)))


class LogitsDrafter:
    """Proposing and sampling shared by the batch-of-one drafters: subclasses give
    `_forward(ids) -> [V]`, the next-token logits after feeding `ids`, and keep `n` (tokens in
    their cache), `max_len`, `suppress` ([V] bool, never proposed) and `eos` (end-of-text ids:
    a draft stops after proposing one, since nothing follows it)."""

    n: int
    max_len: int
    suppress: torch.Tensor
    eos: frozenset[int]

    def _forward(self, ids: list[int]) -> torch.Tensor:
        raise NotImplementedError

    def propose(self, tokens: list[int], n: int, stop_below: float = 0.0) -> list[int]:
        n = min(n, self.max_len - len(tokens))
        drafted: list[int] = []
        if n <= 0:
            return drafted
        logits = self._forward(tokens[self.n :])  # catch up on tokens the main added
        for _ in range(n):
            masked = logits.masked_fill(self.suppress, -math.inf)  # [V]
            token = int(masked.argmax())
            drafted.append(token)
            if token in self.eos or len(drafted) == n:
                break
            # unsure: the main likely rejects it, and a draft token after it is wasted work
            if stop_below > 0 and probability(masked, token) < stop_below:
                break
            logits = self._forward([token])
        return drafted

    def sample(
        self, tokens: list[int], n: int, process: Process, generator: torch.Generator | None
    ) -> tuple[list[int], torch.Tensor]:
        n = min(n, self.max_len - len(tokens))
        drafted: list[int] = []
        rows: list[torch.Tensor] = []
        if n <= 0:
            return drafted, torch.empty(0)
        logits = self._forward(tokens[self.n :])
        for _ in range(n):
            masked = logits.float().masked_fill(self.suppress.to(logits.device), -math.inf)
            q = torch.softmax(process([*tokens, *drafted], masked[None])[0], dim=-1)
            token = draw(q, generator)
            drafted.append(token)
            rows.append(q)
            if token in self.eos or len(drafted) == n:
                break
            logits = self._forward([token])
        return drafted, torch.stack(rows)


# ---------------------------------------------------------------------------------------------
# The self-int8 draft model


def self_int8(main: Loaded, cache: ModelCache = CACHE) -> Loaded:
    """The self-int8 draft of `main`, built once per main and dtype and kept in `cache`."""
    if main.device.type != "cpu":
        raise CheckpointError(SELF_INT8_CPU_ONLY)  # a refusal: the cache stays as it is
    return cache.derived(SELF_INT8, main, build_self_int8)


def _float32_encoder_states(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple:
    """Forward pre-hook of the self-int8 decoder: int8 dynamic Linear layers take fp32 inputs
    only, while the main (in bf16 or fp16) hands over its encoder outputs in its own dtype."""
    states = kwargs.get("encoder_hidden_states")
    if states is not None and states.dtype != torch.float32:
        kwargs["encoder_hidden_states"] = states.float()
    return args, kwargs


def build_self_int8(main: Loaded) -> Loaded:
    """The main's own decoder with every Linear in int8 (per-channel, dynamic activations) and
    the tanh approximation of GELU.

    Returned as a WhisperForCausalLM so transformers' assisted generation can use it as a
    decoder-only assistant that reads the main's encoder outputs, exactly like a distil model.
    It computes in fp32 whatever the main's dtype: encoder outputs in another dtype are cast on
    the way in. CPU only: fbgemm int8 kernels have no CUDA counterpart.
    """
    from transformers import WhisperForCausalLM

    if main.device.type != "cpu":
        raise CheckpointError(SELF_INT8_CPU_ONLY)
    start = time.perf_counter()
    config = copy.deepcopy(main.model.config)
    config.architectures = ["WhisperForCausalLM"]
    config.dtype = torch.float32
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
    draft.model.decoder.register_forward_pre_hook(_float32_encoder_states, with_kwargs=True)
    draft.generation_config = copy.deepcopy(main.model.generation_config)
    ckpt = Checkpoint(SELF_INT8, main.checkpoint.family, True, main.checkpoint.d_model, 0)
    load_s = time.perf_counter() - start
    return Loaded(ckpt, draft, None, load_s, main.device, torch.float32, main.revision)


# ---------------------------------------------------------------------------------------------
# The lean int8 forward of the self-int8 draft, for a batch of rows (one row at batch size 1)


def int8_linear(x: torch.Tensor, weight: Any, reduce_range: bool = True) -> torch.Tensor:
    """fbgemm's dynamic int8 Linear: one activation scale for all rows of x, from their range."""
    return torch.ops.quantized.linear_dynamic(x, weight, reduce_range=reduce_range)


@dataclass(frozen=True)
class LeanLayer:
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
class LeanWeights:
    layers: tuple[LeanLayer, ...]
    embed: torch.Tensor  # [V, D]
    positions: torch.Tensor  # [T_max, D]
    norm_final: tuple[torch.Tensor, torch.Tensor]
    head: Any
    activation: Callable[[torch.Tensor], torch.Tensor]
    n_heads: int
    head_dim: int
    d_model: int


def lean_weights(model: torch.nn.Module) -> LeanWeights:
    """The self-int8 WhisperForCausalLM's weights, repacked once per model for Int8SelfDrafter."""
    cached = getattr(model, "_specwhisper_lean", None)
    if cached is not None:
        return cached
    decoder = model.model.decoder

    def norm(m: torch.nn.LayerNorm) -> tuple[torch.Tensor, torch.Tensor]:
        return m.weight.detach(), m.bias.detach()

    layers = tuple(
        LeanLayer(
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
    weights = LeanWeights(
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


def lean_cache(
    w: LeanWeights, n_rows: int, max_len: int, make: Callable[..., torch.Tensor] = torch.zeros
) -> tuple[torch.Tensor, torch.Tensor]:
    """The lean forward's self-attention keys and values, [L, B, H, T_max, Dh] each."""
    shape = (len(w.layers), n_rows, w.n_heads, max_len, w.head_dim)
    return make(shape), make(shape)


def main_cross_keys_values(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The lean draft's copy of the main's cross-attention keys/values, per layer [B, ...]: the
    main's cache after its first pass of a window holds them for every row."""
    dtype = cross_dtype()
    return [
        cross_keys_values(layer.keys, layer.values, dtype)
        for layer in cache.cross_attention_cache.layers
    ]


@torch.inference_mode()
def lean_forward(
    w: LeanWeights,
    k_cache: torch.Tensor,  # [L, B, H, T_max, Dh], written at the fed positions
    v_cache: torch.Tensor,
    cross: list[tuple[torch.Tensor, torch.Tensor]],  # per layer, from main_cross_keys_values
    ids: list[list[int]],  # per row: the tokens fed (any number, 0 included)
    start: list[int],  # per row: the position of its first fed token (tokens it holds)
) -> torch.Tensor:
    """The lean int8 draft's forward over a batch: each row's tokens at its own positions; the
    logits after each row's last fed token, [B, V] (any row for a row fed nothing).

    Rows at one position, fed the same number of tokens (always so for one row), take slices
    and at most a causal mask; ragged rows are padded to the longest and masked: a row's
    queries see its positions up to their own, so a pad, written past a row's count, is never
    read. One activation scale per int8 matmul covers every row: in a batch each row's
    rounding depends on the others', a small difference the main's verification absorbs.
    """
    linear, d, n_rows = int8_linear, w.d_model, len(ids)
    n_fed = [len(row) for row in ids]
    n_cols = max(1, *n_fed)  # K
    even = len(set(start)) == 1 and min(n_fed) == n_cols
    if even:
        first = start[0]
        span = first + n_cols  # keys read: positions 0 .. span - 1
        x = w.embed[torch.tensor(ids)] + w.positions[first:span]  # [B, K, D]
        mask = torch.ones(n_cols, span, dtype=torch.bool).tril(first) if n_cols > 1 else None
    else:
        tokens = torch.tensor([row + [0] * (n_cols - len(row)) for row in ids])  # [B, K]
        pos = torch.tensor(start)[:, None] + torch.arange(n_cols)
        pos = pos.clamp(max=k_cache.shape[3] - 1)  # [B, K]; a pad may sit at any position
        rows = torch.arange(n_rows)[:, None]
        span = int(pos.max()) + 1
        x = w.embed[tokens] + w.positions[pos]  # [B, K, D]
        mask = torch.arange(span)[None, None, None, :] <= pos[:, None, :, None]  # [B,1,K,T]
    x = x.reshape(n_rows * n_cols, d)  # [B*K, D]
    for i, layer in enumerate(w.layers):
        h = F.layer_norm(x, (d,), *layer.norm_self)
        qkv = linear(h, layer.qkv).view(n_rows, n_cols, 3, w.n_heads, -1)  # q pre-scaled
        keys, values = qkv[:, :, 1], qkv[:, :, 2]  # [B, K, H, Dh]
        if even:
            k_cache[i, :, :, first:span] = keys.transpose(1, 2)
            v_cache[i, :, :, first:span] = values.transpose(1, 2)
        else:  # advanced indices around a slice: the indexed view is [B, K, H, Dh]
            k_cache[i][rows, :, pos] = keys
            v_cache[i][rows, :, pos] = values
        kt = k_cache[i, :, :, :span].transpose(-1, -2)  # [B, H, Dh, T]
        a = _attend(qkv[:, :, 0].transpose(1, 2), kt, v_cache[i, :, :, :span], mask)  # [B,H,K,Dh]
        x = x + linear(a.transpose(1, 2).reshape(n_rows * n_cols, d), layer.out)
        h = F.layer_norm(x, (d,), *layer.norm_cross)
        q = linear(h, layer.cross_q).view(n_rows, n_cols, w.n_heads, -1).transpose(1, 2)
        a = attend_cross(q, cross[i])  # [B, H, K, Dh]
        x = x + linear(a.transpose(1, 2).reshape(n_rows * n_cols, d), layer.cross_out)
        h = F.layer_norm(x, (d,), *layer.norm_ffn)
        h = w.activation(linear(h, layer.fc1))
        x = x + linear(h, layer.fc2)
    x = x.view(n_rows, n_cols, d)
    if even:  # only each row's last position matters
        last = x[:, -1]
    else:
        last = x[torch.arange(n_rows), torch.tensor([max(n, 1) - 1 for n in n_fed])]
    return linear(F.layer_norm(last, (d,), *w.norm_final), w.head)  # [B, V]


class Int8SelfDrafter(LogitsDrafter):
    """The self-int8 draft run through the lean int8 forward (`lean_forward`) for one row.

    The same int8 weights, tanh GELU and dynamic activation quantization as the self-int8
    WhisperForCausalLM that transformers' assisted loop uses (build_self_int8), with
    fewer and cheaper tensor ops: the query, key and value projections are one int8 matmul
    (per-channel quantization is per output row, so fusing them changes nothing), the packed
    fbgemm weights are called directly, and no transformers cache objects or masks are built.
    Two differences in what it computes: it reuses the main model's cross-attention keys/values
    (computed once per window by the main's first pass) instead of projecting the encoder
    outputs again through int8 weights, and it keeps its own copy of them in `cross_dtype()`
    (bf16 where the CPU has bf16 instructions, else fp32).
    """

    def __init__(self, draft: Loaded, suppress: torch.Tensor, eos: frozenset[int]):
        self.w = lean_weights(draft.model)
        self.suppress = suppress  # [V] bool: tokens the draft never proposes
        self.eos = eos
        self.max_len = draft.model.config.max_target_positions
        # [L, 1, H, T_max, Dh]; only positions below n are ever read, and each is written first
        self.k, self.v = lean_cache(self.w, 1, self.max_len, torch.empty)
        self.cross: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.n = 0  # tokens whose K/V are in the cache

    def begin(self, encoder_hidden: torch.Tensor, cache: Any, features: torch.Tensor) -> None:
        self.cross = main_cross_keys_values(cache)  # once per window
        self.n = 0

    def _forward(self, ids: list[int]) -> torch.Tensor:
        """Feed ids at positions n.. n+len(ids); return last-position logits [V]."""
        logits = lean_forward(self.w, self.k, self.v, self.cross, [ids], [self.n])
        self.n += len(ids)
        return logits[0]

    def accept(self, n_valid: int) -> None:
        self.n = min(self.n, n_valid)


class HFDrafter(LogitsDrafter):
    """Any transformers Whisper model as a draft: seq2seq with its own encoder, or decoder-only
    (distil) reading the main's encoder outputs. Uses a transformers cache cropped on rejection."""

    def __init__(self, draft: Loaded, suppress: torch.Tensor, eos: frozenset[int]):
        self.model = draft.model
        self.eos = eos
        self.decoder_only = draft.checkpoint.decoder_only
        self.suppress = suppress.to(draft.device)
        self.device, self.dtype = draft.device, draft.dtype  # (a bf16 encoder makes
        # transformers' model.dtype read bf16; the encoder's hook casts its input itself)
        self.max_len = draft.model.config.max_target_positions
        self.n = 0
        self.cache: Any = None
        self.encoder_hidden: torch.Tensor | None = None

    def begin(self, encoder_hidden: torch.Tensor, cache: Any, features: torch.Tensor) -> None:
        from transformers import DynamicCache, EncoderDecoderCache

        if self.decoder_only:
            self.encoder_hidden = encoder_hidden.to(self.dtype)
            self.cache = DynamicCache()
        else:
            with torch.inference_mode():
                encoder = self.model.get_encoder()
                self.encoder_hidden = encoder(features.to(self.dtype)).last_hidden_state
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
        return out.logits[0, -1].float()

    def accept(self, n_valid: int) -> None:
        if self.n > n_valid:
            crop_cache(self.cache, n_valid)
            self.n = n_valid


def cross_dtype() -> torch.dtype:
    """The dtype of the lean int8 draft's own copy of the main's cross-attention keys/values.

    Reading them is a third of a draft step (37 MB per token for base in fp32). In bf16 they are
    half the bytes, and where the CPU has bf16 instructions the fused attention kernel reads them
    at about twice the speed; without them fp32 stays (on an AVX2 CPU a bf16 attention product
    measured about 3x slower than fp32: BENCHMARKS). Only the draft's proposals can change: the
    main verifies in its own precision. SPECWHISPER_DRAFT_CROSS (auto, fp32 or bf16) overrides
    the choice, for ablations and tests."""
    choice = os.environ.get("SPECWHISPER_DRAFT_CROSS", "auto").lower()
    if choice not in ("auto", "fp32", "bf16"):
        raise ValueError(f"SPECWHISPER_DRAFT_CROSS must be auto, fp32 or bf16, not {choice!r}")
    if choice == "auto":
        return torch.bfloat16 if has_native_bf16() else torch.float32
    return torch.bfloat16 if choice == "bf16" else torch.float32


def cross_precision(assistant: Loaded, engine: str) -> str | None:
    """What results say of the lean self-int8 draft's cross-attention copy: "float32" or
    "bfloat16"; None where no lean draft runs (another assistant, or transformers' engine)."""
    if assistant.checkpoint.id != SELF_INT8 or engine != "specwhisper":
        return None
    return dtype_name(cross_dtype())


def cross_keys_values(
    keys: torch.Tensor, values: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft's copy of one layer's cross-attention keys and values [..., H, S, Dh], laid out
    for `attend_cross`: fp32 keys pre-transposed once ([..., H, Dh, S]) for `_attend`, bf16 ones
    as they are for the fused kernel."""
    if dtype == torch.float32:
        return keys.float().transpose(-1, -2).contiguous(), values.float()
    return keys.to(dtype).contiguous(), values.to(dtype).contiguous()


def attend_cross(q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Cross-attention of queries q [..., H, T, Dh] (pre-scaled, fp32) over a `cross_keys_values`
    copy. With a bf16 copy the whole product runs in bf16 (queries cast, output rounded to bf16)
    and comes back as an fp32 tensor."""
    k, v = kv
    if k.dtype == torch.float32:
        return _attend(q, k, v)
    flat = q.dim() == 3  # [H, T, Dh]: the fused kernel's fast path wants a batch dimension
    if flat:
        q, k, v = q[None], k[None], v[None]
    a = F.scaled_dot_product_attention(q.to(k.dtype), k, v, scale=1.0).float()
    return a[0] if flat else a


def _attend(
    q: torch.Tensor, kt: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Plain attention: for a few queries it beats the fused CPU kernel's set-up cost.
    q [..., H, T, Dh] (pre-scaled), kt [..., H, Dh, S] (keys transposed), v [..., H, S, Dh]."""
    w = q @ kt  # [..., H, T, S]
    if mask is not None:
        w = w.masked_fill(~mask, -math.inf)
    return w.softmax(dim=-1) @ v  # [..., H, T, Dh]


def crop_cache(cache: Any, keep: int) -> None:
    """Drop cached positions from `keep` on (transformers 5 crops by a negative count)."""
    extra = cache.get_seq_length() - keep
    if extra > 0:
        cache.crop(-extra)


def draft_vocabulary(main: Loaded) -> tuple[torch.Tensor, frozenset[int]]:
    """What a draft may propose for this main: the [V] bool mask of tokens the main's generate
    never emits, and the end-of-text ids (a draft stops after one)."""
    config = main.model.generation_config
    vocab = main.model.config.vocab_size
    suppress = torch.zeros(vocab, dtype=torch.bool)
    suppress[[i for i in (config.suppress_tokens or []) if i < vocab]] = True
    eos = config.eos_token_id
    eos = frozenset(eos if isinstance(eos, list) else [] if eos is None else [eos])
    return suppress, eos


def make_drafter(main: Loaded, assistant: Loaded) -> Drafter:
    """The drafter for this assistant, proposing only tokens the main's generate may emit."""
    suppress, eos = draft_vocabulary(main)
    if assistant.checkpoint.id == SELF_INT8:
        return Int8SelfDrafter(assistant, suppress, eos)
    return HFDrafter(assistant, suppress, eos)
