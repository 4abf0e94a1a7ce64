"""The drafters: the lean self-int8 drafter computes the draft model it is built from, and its
bf16 copy of the cross-attention keys/values stays close to the fp32 one."""

from __future__ import annotations

import math

import torch
from tiny import noise_clips

from specwhisper import checkpoints, decoding, drafters


def test_lean_self_int8_drafter_computes_the_draft_model(loaded, monkeypatch):
    """Int8SelfDrafter (fused int8 QKV, packed weights, preallocated cache) gives the logits of
    the self-int8 WhisperForCausalLM it is built from, when both read the same cross-attention
    keys/values (the main's, in fp32) and get the same tokens in the same chunks (dynamic int8
    quantizes each chunk's activations with one scale, so chunking changes the numbers)."""
    from transformers import DynamicCache, EncoderDecoderCache

    monkeypatch.setenv("SPECWHISPER_DRAFT_CROSS", "fp32")
    main, drafts = loaded
    draft = drafts[checkpoints.SELF_INT8].model
    features = decoding.prepare_features(main, noise_clips(1)[0])
    ids = [5, 17, 42, 99, 7, 256, 31, 64, 3]
    with torch.inference_mode():
        encoder = main.model.model.encoder(features.input_features).last_hidden_state
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        main.model.model.decoder(
            input_ids=torch.tensor([ids[:1]]), encoder_hidden_states=encoder, past_key_values=cache
        )
        drafter = drafters.make_drafter(main, drafts[checkpoints.SELF_INT8])
        drafter.k.fill_(math.nan)  # the cache is never read before it is written
        drafter.v.fill_(math.nan)
        drafter.begin(encoder, cache, features.input_features)
        # The draft model, handed the main's cross-attention keys/values as its own.
        theirs_cache = EncoderDecoderCache(DynamicCache(), cache.cross_attention_cache)

        def theirs(chunk: list[int]) -> torch.Tensor:
            out = draft(
                input_ids=torch.tensor([chunk]),
                encoder_outputs=encoder,  # needed to run cross-attention; its K/V are cached
                past_key_values=theirs_cache,
            )
            return out.logits[0, -1]

        # A chunk, then one token at a time. A chunk's own logits are not compared: the draft
        # model projects every position (one activation scale for all), ours only the last.
        drafter.next_logits(ids[:4])
        theirs(ids[:4])
        for t in ids[4:]:
            ours = drafter.next_logits([t])
            torch.testing.assert_close(ours, theirs([t]), rtol=1e-4, atol=1e-4)
        # Rolled back to 5 tokens, it continues as if the later ones had never been fed: a
        # chunk after the start (causal mask offset), then single tokens again.
        drafter.accept(5)
        drafters.crop_cache(theirs_cache.self_attention_cache, 5)
        drafter.next_logits([77, 12, 8])
        theirs([77, 12, 8])
        for t in (40, 2):
            torch.testing.assert_close(drafter.next_logits([t]), theirs([t]), rtol=1e-4, atol=1e-4)


def _lean_logits(main, draft, cross: str, monkeypatch) -> list[torch.Tensor]:
    """The lean int8 draft's logits for a chunk, then single tokens, a roll-back and a chunk
    after it, with its copy of the cross-attention keys/values in `cross`."""
    from transformers import DynamicCache, EncoderDecoderCache

    monkeypatch.setenv("SPECWHISPER_DRAFT_CROSS", cross)
    features = decoding.prepare_features(main, noise_clips(1)[0])
    with torch.inference_mode():
        encoder = main.model.model.encoder(features.input_features).last_hidden_state
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        main.model.model.decoder(
            input_ids=torch.tensor([[5]]), encoder_hidden_states=encoder, past_key_values=cache
        )
        drafter = drafters.make_drafter(main, draft)
        drafter.begin(encoder, cache, features.input_features)
        logits = [drafter.next_logits([5, 17, 42, 99])]
        logits += [drafter.next_logits([t]) for t in (7, 256, 31)]
        drafter.accept(5)
        return [*logits, drafter.next_logits([77, 12, 8]), drafter.next_logits([40])]


def test_bf16_cross_attention_copy_stays_close_to_fp32(loaded, monkeypatch):
    """The lean draft's bf16 copy of the cross-attention keys/values against its fp32 copy, on
    the same chunks: a sanity bound, the logits within 15% of their range. The difference grows
    layer by layer (a bf16 rounding that moves an activation also moves the dynamic int8 scale
    of the next matmul) and differs between torch's CPU kernel paths, so the kernel itself is
    checked tightly in the test above. A random
    model's near-ties can then pick another token: only the draft's proposals can change (its
    acceptance on real speech is in BENCHMARKS), and the identity test below shows the main
    still decides every token."""
    main, drafts = loaded
    fp32 = _lean_logits(main, drafts[checkpoints.SELF_INT8], "fp32", monkeypatch)
    bf16 = _lean_logits(main, drafts[checkpoints.SELF_INT8], "bf16", monkeypatch)
    for ours, exact in zip(bf16, fp32, strict=True):
        spread = float(exact.max() - exact.min())
        torch.testing.assert_close(ours, exact, rtol=0.0, atol=0.15 * spread)
