"""The verify pass's fp32 matmuls over several rows, through oneDNN with weights packed once.

On a CPU, `F.linear` calls MKL's fp32 GEMM, which leaves its fast one-row path from two rows
on (two threads, `epyc-avx2`): a main pass over 7 tokens cost about twice a pass over one.
oneDNN, given a weight reordered once into its own blocked layout
(`torch.ops.mkldnn._reorder_linear_weight`, what inductor's freezing uses), is faster from two
rows on: on `epyc-avx2`, two threads, the output projection over 8 rows took 8.1 ms against
19.6 ms through a [D, V] copy and 27.0 ms through `F.linear`, and a whisper-base decoder Linear
about half of `F.linear`'s time (BENCHMARKS.md#lever-packed).

Only calls made inside `rows_pass()` with two rows or more take the packed path: a one-row call
(the baseline's steps, our loop's at γ 0 after the prompt), everything outside it (plain
`generate`, the peer) and any tensor that is not fp32 on the CPU run `F.linear` exactly as
transformers does. The loop's output projection (loop.projection) takes it for any multi-row
fp32 call. Each logit is the same dot product either way; only its rounding can differ, by a
few ulps, as a wider pass's already does. Where torch has no oneDNN, or SPECWHISPER_PACKED=0
(for ablations), nothing changes.

It does not choose where the verify pass runs (see loop) or what it feeds (see batch_loop).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator

import torch
import torch.nn.functional as F

_IN_PASS = contextvars.ContextVar("specwhisper_packed_rows_pass", default=False)
# A packed copy doubles the memory of what it copies: a decoder whose Linear weights weigh more
# (whisper-medium's, 1.6 GB in fp32, and up) keeps MKL; whisper-small's weigh 0.45 GB, base's
# 0.1 GB. (loop.projection packs the output matrix at any size.)
MAX_COPY_BYTES = 512 * 2**20


def available() -> bool:
    """Whether this torch has oneDNN's packed fp32 Linear on the CPU, and it is not switched
    off."""
    return (
        os.environ.get("SPECWHISPER_PACKED", "1") != "0"
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


def pack(weight: torch.Tensor) -> torch.Tensor:
    """An fp32 [out, in] weight in oneDNN's layout (an opaque tensor of the same shape)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] @ the packed weight's transpose (+ bias): [..., out]."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def wanted(x: torch.Tensor) -> bool:
    """Whether a matmul on x can take the packed path: fp32 on the CPU, two rows or more."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.shape[:-1].numel() > 1
        and available()
    )


@contextlib.contextmanager
def rows_pass() -> Iterator[None]:
    """The packed path for this thread's (and context's) matmuls while inside."""
    token = _IN_PASS.set(True)
    try:
        yield
    finally:
        _IN_PASS.reset(token)


class PackedLinear(torch.nn.Linear):
    """An nn.Linear whose multi-row fp32 calls inside rows_pass use a packed copy of its weight
    (packed_copy). Every other call is nn.Linear's own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (_IN_PASS.get() and wanted(x) and self.weight.device.type == "cpu"):
            return F.linear(x, self.weight, self.bias)
        return linear(x, packed_copy(self), self.bias)


def packed_copy(owner: torch.nn.Linear) -> torch.Tensor:
    """owner's weight packed, kept on owner: made on first use and made again whenever the
    weight's storage changes (a move to another device and back, an in-place update)."""
    key = (owner.weight.data_ptr(), owner.weight._version)
    cached = owner.__dict__.get("_specwhisper_packed")
    if cached is None or cached[0] != key:
        cached = owner.__dict__["_specwhisper_packed"] = (key, pack(owner.weight))
    return cached[1]


def install(module: torch.nn.Module) -> None:
    """Make every nn.Linear inside module a PackedLinear (same parameters, same state dict; only
    its class changes), unless their weights weigh more than MAX_COPY_BYTES. Idempotent."""
    linears = [m for m in module.modules() if type(m) is torch.nn.Linear]
    n_bytes = sum(m.weight.numel() * m.weight.element_size() for m in linears)
    if not available() or n_bytes > MAX_COPY_BYTES:
        return
    for module_ in linears:
        module_.__class__ = PackedLinear
