"""Token identity and step replay on every clip of the shared speech set.

Measures, for one main checkpoint with the self-int8 draft (our engine, the default adaptive
schedule, fp32, greedy, one run per side, no timing): how many clips give the baseline's token
ids exactly, and on how many the speculative run's steps replay to exactly its tokens. The
replay is checked for one window; a long-form clip's steps also hold each window's end-of-text,
which long-form output drops between windows, so such a clip counts as not replaying.

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python scripts/identity.py whisper-base all
    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python scripts/identity.py whisper-tiny.en en

`all`: every clip in its manifest language; `en`: the English clips only. Prints each clip that
differs, then a summary; the last line is one JSON document.
"""

import argparse
import csv
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import checkpoints, decoding, drafters, loading
from specwhisper.audio import load_audio
from specwhisper.decoding import DecodeOptions
from specwhisper.loop import step_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("main", help="main checkpoint, e.g. whisper-base")
    parser.add_argument("languages", choices=["all", "en"], help="every clip, or English only")
    parser.add_argument("--speech", default="../shared/data/speech", help="the clips' folder")
    parser.add_argument("--limit", type=int, default=None, help="stop after this many clips")
    args = parser.parse_args()
    torch.set_num_threads(1)

    root = Path(args.speech)
    main = loading.CACHE.get(checkpoints.resolve(args.main), torch.device("cpu"), torch.float32)
    draft = drafters.self_int8(main)
    with (root / "manifest.tsv").open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t")]
    rows = [r for r in rows if args.languages == "all" or r["language"] == "en"][: args.limit]
    n_clips = n_identical = n_replayed = 0
    for row in rows:
        feats = decoding.prepare_features(main, load_audio(root / row["file"]).samples)
        language = None if main.checkpoint.english_only else row["language"]
        opts = DecodeOptions(language=language, task="transcribe")
        base = decoding.decode_baseline(main, feats, opts)
        spec = decoding.decode_speculative(main, draft, feats, opts)
        replayed = [t for s in spec.steps for t in step_tokens(s)]
        n_clips += 1
        n_identical += spec.token_ids == base.token_ids
        # a step may end with the end-of-text, which the output leaves out
        n_replayed += replayed[: spec.n_tokens] == list(spec.token_ids) and len(
            replayed
        ) - spec.n_tokens in (0, 1)
        if spec.token_ids != base.token_ids:
            print("DIFF", row["file"])
    print(f"{args.main}: identical {n_identical}/{n_clips}, steps replay {n_replayed}/{n_clips}")
    summary = {"n_clips": n_clips, "n_identical": n_identical, "n_replayed": n_replayed}
    print(json.dumps({"main": args.main, "languages": args.languages, **summary}))


if __name__ == "__main__":
    main()
