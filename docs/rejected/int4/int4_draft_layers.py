"""A dropped lever, built and measured, not kept (BENCHMARKS.md#dropped-int4): the lean
self-int8 draft with its decoder layers' Linear weights in int4 (torch's CPU int4 pack,
asymmetric scales per group of I4_GROUP input columns, bf16 activations), built from the main's
fp32 weights; the output head stays int8 unless I4_HEAD=1, and I4_LAYERS=0
leaves the layers int8.

Run as a script, or after `install()`, it patches specwhisper in memory (no file changes):

    python docs/rejected/int4/int4_draft_layers.py <bench arguments>  # I4=0: int8
"""

import dataclasses
import os
import runpy
import sys

import torch

from specwhisper import decoding, drafters, int8_forward

GROUP = int(os.environ.get("I4_GROUP", "64"))
HEAD4 = os.environ.get("I4_HEAD", "0") == "1"
LAYERS4 = os.environ.get("I4_LAYERS", "1") == "1"


class Int4Linear:
    """y = x @ W.T + b with W [N, K] in int4: w = (q - 8) * scale + zero per group of columns."""

    def __init__(self, w: torch.Tensor, b: torch.Tensor | None, group: int = GROUP):
        n, k = w.shape
        self.n = n
        pad = (-n) % 16  # the CPU pack wants N in multiples of 16 (the head: 51,865 rows)
        if pad:
            w = torch.cat([w, torch.zeros(pad, k)])
            b = None if b is None else torch.cat([b, torch.zeros(pad)])
        rows = w.shape[0]
        wg = w.reshape(rows, k // group, group)
        hi, lo = wg.amax(-1, keepdim=True), wg.amin(-1, keepdim=True)
        scale = (hi - lo).clamp(min=1e-8) / 15
        zero = lo + scale * 8
        q = ((wg - lo) / scale).round().clamp(0, 15).to(torch.int32).reshape(rows, k)
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        sz = torch.stack([scale.reshape(rows, -1), zero.reshape(rows, -1)], -1)
        self.scales_zeros = sz.transpose(0, 1).contiguous().to(torch.bfloat16)
        self.group = group
        self.bias = b

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.to(torch.bfloat16), self.packed, self.group, self.scales_zeros
        ).float()
        if self.bias is not None:
            y = y + self.bias
        return y[..., : self.n]


_int8_linear = int8_forward.int8_linear


def linear(x: torch.Tensor, weight, reduce_range: bool = True) -> torch.Tensor:
    if isinstance(weight, Int4Linear):
        return weight(x)
    return _int8_linear(x, weight, reduce_range)


def fused(*mods: torch.nn.Module, scales: tuple[float, ...] | None = None) -> Int4Linear:
    """Like int8_forward._fused_int8: modules reading the same input, stacked along their
    outputs."""
    ws, bs = [], []
    for m, f in zip(mods, scales or (1.0,) * len(mods), strict=True):
        ws.append(m.weight.detach().float() * f)
        bias = m.bias
        bs.append(torch.zeros(m.weight.shape[0]) if bias is None else bias.detach().float() * f)
    return Int4Linear(torch.cat(ws), torch.cat(bs))


def int4_weights(main_model: torch.nn.Module, lean):
    """The lean draft's weights with int4 layers (LAYERS4) and head (HEAD4)."""
    layers = []
    for m, lean_layer in zip(main_model.model.decoder.layers, lean.layers, strict=True):
        if LAYERS4:
            sa, ca = m.self_attn, m.encoder_attn
            lean_layer = dataclasses.replace(
                lean_layer,
                qkv=fused(sa.q_proj, sa.k_proj, sa.v_proj, scales=(sa.scaling, 1.0, 1.0)),
                out=fused(sa.out_proj),
                cross_q=fused(ca.q_proj, scales=(ca.scaling,)),
                cross_out=fused(ca.out_proj),
                fc1=fused(m.fc1),
                fc2=fused(m.fc2),
            )
        layers.append(lean_layer)
    head = Int4Linear(main_model.proj_out.weight.detach().float(), None) if HEAD4 else lean.head
    return dataclasses.replace(lean, layers=tuple(layers), head=head)


_made: dict[int, object] = {}
_make_drafter = drafters.make_drafter


def make_drafter(main, assistant):
    drafter = _make_drafter(main, assistant)
    if isinstance(drafter, drafters.Int8SelfDrafter):
        if id(main.model) not in _made:
            _made[id(main.model)] = int4_weights(main.model, drafter.w)
        drafter.w = _made[id(main.model)]
    return drafter


def install() -> None:
    int8_forward.int8_linear = linear
    drafters.make_drafter = make_drafter
    decoding.make_drafter = make_drafter


if __name__ == "__main__":
    if os.environ.get("I4", "1") == "1":
        install()
    sys.argv[0] = "specwhisper.bench"
    runpy.run_module("specwhisper.bench", run_name="__main__")
