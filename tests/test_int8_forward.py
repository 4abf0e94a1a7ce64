"""The lean int8 forward's cross-attention: the bf16 kernel against the fp32 product, and the
precision of its copy chosen by the CPU or the environment."""

from __future__ import annotations

import math

import pytest
import torch

from specwhisper import int8_forward


@pytest.mark.parametrize("shape", [(6, 3, 16), (2, 6, 3, 16)])  # [H, T, Dh] and [B, H, T, Dh]
def test_bf16_cross_attention_kernel_matches_the_fp32_product(shape):
    """attend_cross over a bf16 copy (the fused kernel, queries pre-scaled so scale 1) against
    the fp32 path (_attend over pre-transposed keys), for the batch-of-one and batched layouts:
    equal within bf16 rounding, about 1% of the output's range."""
    torch.manual_seed(0)
    *lead, t, dh = shape
    q = torch.randn(*lead, t, dh) / math.sqrt(dh)
    keys, values = torch.randn(*lead, 300, dh), torch.randn(*lead, 300, dh)
    exact = int8_forward.attend_cross(
        q, int8_forward.cross_keys_values(keys, values, torch.float32)
    )
    torch.testing.assert_close(exact, (q @ keys.transpose(-1, -2)).softmax(-1) @ values)
    ours = int8_forward.attend_cross(
        q, int8_forward.cross_keys_values(keys, values, torch.bfloat16)
    )
    assert ours.dtype == torch.float32 and ours.shape == exact.shape
    spread = float(exact.max() - exact.min())
    torch.testing.assert_close(ours, exact, rtol=0.0, atol=0.01 * spread)


def test_cross_dtype_follows_the_cpu_and_the_override(monkeypatch):
    monkeypatch.delenv("SPECWHISPER_DRAFT_CROSS", raising=False)
    monkeypatch.setattr(int8_forward, "has_native_bf16", lambda: True)
    assert int8_forward.cross_dtype() == torch.bfloat16
    monkeypatch.setattr(int8_forward, "has_native_bf16", lambda: False)
    assert int8_forward.cross_dtype() == torch.float32  # emulated bf16 would be slower
    monkeypatch.setenv("SPECWHISPER_DRAFT_CROSS", "bf16")
    assert int8_forward.cross_dtype() == torch.bfloat16
    monkeypatch.setenv("SPECWHISPER_DRAFT_CROSS", "fp16")
    with pytest.raises(ValueError, match="auto, fp32 or bf16"):
        int8_forward.cross_dtype()
