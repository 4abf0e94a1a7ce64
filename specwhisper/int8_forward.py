"""self-int8's lean forward: the main's decoder with int8 Linear layers (fbgemm's dynamic int8,
q/k/v fused), a preallocated self-attention cache, and the main's cross-attention keys/values
reused in the draft's own copy (bf16 where the CPU has bf16 instructions). It takes [B, K]
rows, so the batch-1 drafter (drafters.Int8SelfDrafter) and batch mode's
(batch_loop.Int8BatchDrafter) run the same forward.

It proposes nothing and keeps no state between calls: the drafters do.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from specwhisper.timing import has_native_bf16


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
