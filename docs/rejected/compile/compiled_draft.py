"""The self-int8 draft step as one compiled graph (torch.compile, inductor on CPU), opt-in.

`torch.compile` of the lean draft forward breaks the graph at every fbgemm dynamic-int8 linear
(its packed weights are an opaque object dynamo cannot trace), so only the small ops between
them compiled, each piece paying its guards. Here the linear is a `torch.library` custom op,
`specwhisper::int8_linear(x, key)`, over the same packed weights looked up by an integer key:
dynamo sees one opaque op with a known output shape, and the whole step (layer norms,
attention, cache writes, residuals, GELU) becomes one graph with the linears as extern calls.
The arithmetic is the eager step's (the same fbgemm kernel, the same dynamic activation scale);
inductor may fuse the fp32 ops around it, so logits can differ by rounding, and the main still
verifies every token.

The step compiles once, at a window's first draft forward (a warm-up run's, in the bench and
the page; never timed), with dynamic positions and widths so later steps reuse it. Where it
cannot compile (no C++ compiler, which inductor needs on CPU, or any compile error) the draft
stays eager, said once on stderr. Turned on by SPECWHISPER_DRAFT_COMPILE=1.

It does not build the draft's weights (see drafters) or decide what is kept (see loop).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import sys
import threading
import time
from typing import Any

import torch
import torch.nn.functional as F

from specwhisper.drafters import Drafter, Int8SelfDrafter
from specwhisper.int8_forward import LeanWeights, attend_cross, int8_linear

# packed fbgemm weights by key; the op's output width by key (what the fake kernel returns)
_PACKED: dict[int, Any] = {}
_WIDTH: dict[int, int] = {}
_LOCK = threading.Lock()


@torch.library.custom_op("specwhisper::int8_linear", mutates_args=())
def int8_linear_op(x: torch.Tensor, key: int) -> torch.Tensor:
    """fbgemm's dynamic int8 linear over the packed weight registered under `key`."""
    return int8_linear(x, _PACKED[key])


@int8_linear_op.register_fake
def _(x: torch.Tensor, key: int) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], _WIDTH[key]))


def _key(packed: Any) -> int:
    """Register a packed weight; its key."""
    key = id(packed)
    with _LOCK:
        if key not in _PACKED:
            _PACKED[key] = packed
            weight, _ = packed.unpack()
            _WIDTH[key] = weight.shape[0]
    return key


@dataclasses.dataclass(frozen=True)
class KeyedLayer:
    """A LeanLayer whose int8 linears are registry keys."""

    norm_self: tuple[torch.Tensor, torch.Tensor]
    qkv: int
    out: int
    norm_cross: tuple[torch.Tensor, torch.Tensor]
    cross_q: int
    cross_out: int
    norm_ffn: tuple[torch.Tensor, torch.Tensor]
    fc1: int
    fc2: int


def keyed(w: LeanWeights) -> tuple[tuple[KeyedLayer, ...], int]:
    """The layers with keys for their linears, and the head's key."""
    layers = tuple(
        KeyedLayer(
            layer.norm_self,
            _key(layer.qkv),
            _key(layer.out),
            layer.norm_cross,
            _key(layer.cross_q),
            _key(layer.cross_out),
            layer.norm_ffn,
            _key(layer.fc1),
            _key(layer.fc2),
        )
        for layer in w.layers
    )
    return layers, _key(w.head)


def attend(q: torch.Tensor, kt: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None):
    """Plain attention, as the eager step computes it: q [..., H, T, Dh] (pre-scaled), kt
    [..., H, Dh, S] (keys transposed), v [..., H, S, Dh]."""
    w = q @ kt  # [..., H, T, S]
    if mask is not None:
        w = w.masked_fill(~mask, -math.inf)
    return w.softmax(dim=-1) @ v  # [..., H, T, Dh]


def draft_step(
    w: LeanWeights,
    layers: tuple[KeyedLayer, ...],
    head: int,
    k_cache: torch.Tensor,  # [L, 1, H, T_max, Dh], written at the fed positions
    v_cache: torch.Tensor,
    cross: list[tuple[torch.Tensor, torch.Tensor]],
    ids: torch.Tensor,  # [K] token ids fed at positions first .. first + K - 1
    first: int,
) -> torch.Tensor:
    """`int8_forward.lean_forward` for one row, the int8 linears through the custom op: the logits
    after the last fed token, [V]."""
    linear, d = torch.ops.specwhisper.int8_linear, w.d_model
    n_cols = ids.shape[0]
    span = first + n_cols
    x = w.embed[ids] + w.positions[first:span]  # [K, D]
    mask = torch.ones(n_cols, span, dtype=torch.bool).tril(first) if n_cols > 1 else None
    for i, layer in enumerate(layers):
        h = F.layer_norm(x, (d,), *layer.norm_self)
        qkv = linear(h, layer.qkv).view(1, n_cols, 3, w.n_heads, w.head_dim)  # q pre-scaled
        k_cache[i, :, :, first:span] = qkv[:, :, 1].transpose(1, 2)
        v_cache[i, :, :, first:span] = qkv[:, :, 2].transpose(1, 2)
        kt = k_cache[i, :, :, :span].transpose(-1, -2)  # [1, H, Dh, T]
        a = attend(qkv[:, :, 0].transpose(1, 2), kt, v_cache[i, :, :, :span], mask)
        x = x + linear(a.transpose(1, 2).reshape(n_cols, d), layer.out)
        h = F.layer_norm(x, (d,), *layer.norm_cross)
        q = linear(h, layer.cross_q).view(1, n_cols, w.n_heads, w.head_dim).transpose(1, 2)
        a = attend_cross(q, cross[i])  # [1, H, K, Dh]
        x = x + linear(a.transpose(1, 2).reshape(n_cols, d), layer.cross_out)
        h = F.layer_norm(x, (d,), *layer.norm_ffn)
        x = x + linear(w.activation(linear(h, layer.fc1)), layer.fc2)
    return linear(F.layer_norm(x[-1:], (d,), *w.norm_final), head)[0]  # [V]


def compiler_problem() -> str | None:
    """Why inductor cannot compile on this machine, or None."""
    if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        return "no C++ compiler (inductor needs one on CPU)"
    return None


def compiled_drafting() -> bool:
    """SPECWHISPER_DRAFT_COMPILE=1 asks for the compiled draft step."""
    text = os.environ.get("SPECWHISPER_DRAFT_COMPILE", "0").strip().lower()
    if text not in ("0", "1", ""):
        raise ValueError(f"SPECWHISPER_DRAFT_COMPILE must be 0 or 1, not {text!r}")
    return text == "1"


_STEP: Any = None  # the compiled draft_step, shared by every drafter of the process


class CompiledInt8Drafter(Int8SelfDrafter):
    """Int8SelfDrafter whose forward runs the compiled step; eager where compiling failed."""

    compile_s: float | None = None  # the first compiled call's time, compile included

    def __init__(self, drafter: Int8SelfDrafter) -> None:
        self.__dict__.update(drafter.__dict__)
        self.layers, self.head = keyed(self.w)
        self.eager = compiler_problem() is not None

    def next_logits(self, ids: list[int]) -> torch.Tensor:
        global _STEP
        if self.eager:
            return super().next_logits(ids)
        if _STEP is None:
            _STEP = torch.compile(draft_step)
        ids_t = torch.tensor(ids)
        start = time.perf_counter()
        try:
            with torch.inference_mode():
                logits = _STEP(
                    self.w, self.layers, self.head, self.k, self.v, self.cross, ids_t, self.n
                )
        except Exception as e:  # an op inductor cannot lower, a compiler error: stay eager
            print(f"specwhisper: the draft step runs eager ({type(e).__name__})", file=sys.stderr)
            self.eager = True
            return super().next_logits(ids)
        if CompiledInt8Drafter.compile_s is None:
            CompiledInt8Drafter.compile_s = time.perf_counter() - start
        self.n += len(ids)
        return logits


def maybe_compiled(drafter: Drafter) -> Drafter:
    """The drafter with its step compiled when asked (SPECWHISPER_DRAFT_COMPILE=1) and it is the
    lean self-int8 one; otherwise the drafter itself."""
    if compiled_drafting() and isinstance(drafter, Int8SelfDrafter):
        if compiler_problem() is not None:
            print(f"specwhisper: the draft step runs eager: {compiler_problem()}", file=sys.stderr)
            return drafter
        return CompiledInt8Drafter(drafter)
    return drafter
