"""Tiny random Whisper checkpoints, built in the test itself (no download, no real weights).

`save_tiny_checkpoint` writes an ordinary transformers folder: config, generation config,
safetensors weights, a byte-level Whisper tokenizer with the special and timestamp tokens, and
the feature extractor. The vocabulary is small (1767 tokens) but laid out like Whisper's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    GenerationConfig,
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForCausalLM,
    WhisperForConditionalGeneration,
    WhisperProcessor,
    WhisperTokenizerFast,
)

from specwhisper.checkpoints import SELF_INT8

LANGS = ["en", "fr", "es"]
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", *[f"<|{x}|>" for x in LANGS]]
SPECIALS += ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>"]
SPECIALS += ["<|nospeech|>", "<|notimestamps|>"]
TIMESTAMPS = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]


def _byte_vocab() -> dict[str, int]:
    # GPT-2's byte-to-unicode table: every byte gets a printable stand-in character.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): i for i, c in enumerate(cs)}


def build_processor(folder: Path) -> WhisperProcessor:
    vocab = _byte_vocab()
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    folder.mkdir(parents=True, exist_ok=True)
    bpe.save(str(folder / "tokenizer.json"))
    tokenizer = WhisperTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"),
        unk_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
    )
    tokenizer.add_tokens(SPECIALS + TIMESTAMPS, special_tokens=True)
    return WhisperProcessor(WhisperFeatureExtractor(feature_size=80), tokenizer)


def _config(
    processor: WhisperProcessor, layers: int, d_model: int, encoder_layers: int = 2
) -> WhisperConfig:
    tok = processor.tokenizer
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    return WhisperConfig(
        vocab_size=len(tok),
        num_mel_bins=80,
        encoder_layers=encoder_layers,
        decoder_layers=layers,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        d_model=d_model,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=ids["<|startoftranscript|>"],
        eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"],
        # The default 0.02 makes a random decoder repeat one token forever; wider weights give
        # varied sequences that sometimes end, which is what the equality tests need.
        init_std=0.7,
    )


def _generation_config(processor: WhisperProcessor, layers: int) -> GenerationConfig:
    tok = processor.tokenizer
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    vocab_size = len(tok)
    return GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"],
        eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"],
        no_timestamps_token_id=ids["<|notimestamps|>"],
        prev_sot_token_id=ids["<|startofprev|>"],
        is_multilingual=True,
        lang_to_id={f"<|{x}|>": ids[f"<|{x}|>"] for x in LANGS},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        suppress_tokens=[1, 2, 3],
        begin_suppress_tokens=[220 % vocab_size, ids["<|endoftext|>"]],
        max_initial_timestamp_index=50,
        max_length=448,
        alignment_heads=[[layers - 1, 0]],
    )


def save_tiny_checkpoint(
    folder: Path, seed: int, *, layers: int = 2, d_model: int = 64, ending: bool = False
) -> Path:
    """A random Whisper of a few MB with a multilingual-style prompt, saved like a real one.

    A random decoder almost never says end-of-text. `ending=True` makes it likely along one
    direction u: the final layer norm adds 2u and the (tied) end-of-text row is 4.5u, so
    different inputs end after very different numbers of tokens (1 to 100 and more)."""
    processor = build_processor(folder)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(_config(processor, layers, d_model, layers)).eval()
    model.generation_config = _generation_config(processor, layers)
    # Real Whisper rarely emits timestamp tokens in <|notimestamps|> mode; a random one does all
    # the time, and each makes generate re-decode the clip. Shrink their (tied) output rows.
    first = processor.tokenizer.convert_tokens_to_ids(TIMESTAMPS[0])
    with torch.no_grad():
        model.model.decoder.embed_tokens.weight[first:] *= 0.05
        if ending:
            u = torch.randn(d_model)
            u /= u.norm()
            model.model.decoder.layer_norm.bias.copy_(2 * u)
            eos = model.generation_config.eos_token_id
            model.model.decoder.embed_tokens.weight[eos] = 4.5 * u
    model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    return folder


def save_tiny_decoder_only(folder: Path, seed: int, *, layers: int = 1, d_model: int = 64) -> Path:
    """A random distil-style assistant: a decoder (WhisperForCausalLM) that reads the main's
    encoder outputs, so its width (and, for transformers' checks, its encoder fields) must
    equal the main's."""
    processor = build_processor(folder)
    torch.manual_seed(seed)
    model = WhisperForCausalLM(_config(processor, layers, d_model)).eval()
    model.config.architectures = ["WhisperForCausalLM"]
    model.generation_config = _generation_config(processor, layers)
    model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    return folder


# Every kind of assistant: the main itself (every draft accepted), a differently seeded seq2seq
# model (most drafts rejected), a decoder-only one reading the main's encoder outputs, and the
# main's own int8 decoder.
ASSISTANTS = ["tiny-random-a", "tiny-random-b", "tiny-random-decoder", SELF_INT8]


def noise_clips(n: int) -> list[np.ndarray]:
    """n clips of noise (float32 arrays), each giving a random model a different output."""
    rng = np.random.default_rng(1234)
    # Random noise of varied lengths and loudness: each gives a different random-model output.
    return [
        (rng.standard_normal(int(16_000 * rng.uniform(0.5, 8))) * rng.uniform(0.05, 0.5)).astype(
            np.float32
        )
        for _ in range(n)
    ]
