"""Parallel drafting at batch size 1: the draft proposes the next block while the main verifies
the current one (PEARL, Liu et al., ICLR 2025), so a draft that is usually right costs little
of the critical path.

Each step hands the draft a job on one worker thread: continue the sequence *as if the block
under verification is kept whole*: first its guess of the main's own next token (the bonus
after a full accept), then the tokens after that guess. Meanwhile the main verifies the block,
exactly as the sequential loop does. Then:
- full accept and the main's own token equals the draft's guess: the tokens after the guess are
  the next block, already drafted;
- anything else: the job's tokens are dropped, both caches roll back to the kept tokens, and the
  next step verifies the main's own token alone while the draft drafts again from it.

The main verifies every token, so greedy output is the baseline's token for token whatever the
draft proposes or however far it got. Sampling runs the sequential loop (`speculative_decode`):
speculative sampling needs the draft's probabilities for the block it verifies, drawn from the
settled prefix, and drafting ahead of an unsettled one is not implemented here.

Threads, one intra-op thread each: torch releases the GIL inside its kernels, and
`torch.set_num_threads` is process-wide (OpenMP's and MKL's counts: setting it in one Python
thread changes it for all), so for the loop's duration the process runs one intra-op thread and
the main's pass and the draft's forwards each hold a core; the count is restored afterwards. On a
machine with more than two cores the main therefore gives up its other intra-op threads while it
decodes in parallel mode. The draft's job runs in a copy of the run's context, so a stop flag
(specwhisper.cancel) reaches a draft model's passes too; the worker is joined before the loop
returns or raises, so no thread outlives a run.

It does not choose the drafter (see drafters) or build the main's pass (see loop).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from specwhisper.drafters import Drafter, crop_cache
from specwhisper.loop import (
    DraftStep,
    LoopStats,
    Window,
    accept,
    own_loop,
    speculative_decode,
    step_tokens,
    verifier,
)
from specwhisper.schedule import GammaSchedule
from specwhisper.timing import clock

# the worker thread's name, so a test (or a person with py-spy) can tell it from others
THREAD_NAME = "specwhisper-draft"


def parallel_drafting(requested: bool) -> bool:
    """Whether to draft in parallel: the option, or SPECWHISPER_PARALLEL_DRAFT=1 (for the bench's
    ablations, which build their options themselves)."""
    text = os.environ.get("SPECWHISPER_PARALLEL_DRAFT", "0").strip().lower()
    if text not in ("0", "1", "false", "true", ""):
        raise ValueError(f"SPECWHISPER_PARALLEL_DRAFT must be 0 or 1, not {text!r}")
    return requested or text in ("1", "true")


def draft_ahead(
    drafter: Drafter, tokens: list[int], cap: int, stop: threading.Event, eos: set[int]
) -> tuple[list[int], float]:
    """The worker's job: continue `tokens` greedily, one draft forward at a time, until `cap`
    tokens, an end-of-text, or `stop` (checked between forwards: the main's pass is done and
    waits). Returns the tokens and the seconds spent."""
    start = time.perf_counter()
    ahead: list[int] = []
    while len(ahead) < cap and not stop.is_set():
        new = drafter.propose([*tokens, *ahead], 1)
        if not new:  # the draft's position limit
            break
        ahead += new
        if new[-1] in eos:
            break
    return ahead, time.perf_counter() - start


def ahead_cap(schedule: GammaSchedule, n_block: int) -> int:
    """How many forwards the draft runs while the main verifies a block of `n_block`: its guess
    of the main's token, then a block of as many tokens as fit in that pass by the costs the
    schedule measured in this mode (a job's seconds by the block it gave, the main's pass by
    width), at most max_gamma; before anything was measured, the most."""
    if not schedule.draft_steps or not schedule.t_verify_s:
        return schedule.max_gamma + 1
    budget_s = schedule.verify_cost(n_block + 1)
    fits = [g for g in range(1, schedule.max_gamma + 1) if schedule.draft_cost(g) <= budget_s]
    return 1 + max(fits, default=0)


@contextlib.contextmanager
def one_thread_each() -> Iterator[None]:
    """One intra-op thread for the process while the main and the draft run side by side (the
    count is process-wide: each Python thread then runs its kernels on one core)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class DraftWorker:
    """One worker thread running `draft_ahead` jobs, one at a time. `close` stops a running
    job at its next forward and joins the thread; it is safe to call more than once."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_NAME)
        self._stop = threading.Event()

    def submit(
        self, drafter: Drafter, tokens: list[int], cap: int, eos: set[int]
    ) -> Future[tuple[list[int], float]]:
        self._stop = threading.Event()
        context = contextvars.copy_context()  # the run's stop flag reaches the draft's passes
        return self._pool.submit(context.run, draft_ahead, drafter, tokens, cap, self._stop, eos)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=True, cancel_futures=True)


def parallel_decode(
    main: torch.nn.Module,
    drafter: Drafter,
    schedule: GammaSchedule,
    stats: LoopStats,
    input_ids: torch.LongTensor,
    logits_processor: Any,
    generation_config: Any,
    *,
    inputs_tensor: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    **model_kwargs: Any,
) -> Any:
    """`speculative_decode` with the draft working ahead on a second thread; the same arguments
    and return value. Greedy only: a sampling call runs the sequential loop."""
    if getattr(generation_config, "do_sample", False):
        return speculative_decode(
            main,
            drafter,
            schedule,
            stats,
            input_ids,
            logits_processor,
            generation_config,
            inputs_tensor=inputs_tensor,
            generator=generator,
            **model_kwargs,
        )
    window = Window.open(input_ids, generation_config, model_kwargs)
    device, cache, eos, max_length = input_ids.device, window.cache, window.eos, window.max_length
    encoder_hidden, tokens = window.encoder_hidden, window.tokens
    verify = verifier(main, cache, encoder_hidden, list(logits_processor))
    stats.n_windows += 1
    worker = DraftWorker()
    with torch.inference_mode(), one_thread_each(), contextlib.closing(worker):
        # 1. Prefill, as in the sequential loop; then the draft reads the window.
        rows = verify([], tokens, 1)
        step = DraftStep((), 0, int(rows[0].argmax()))
        drafter.begin(encoder_hidden, cache, inputs_tensor)
        block: list[int] = []  # drafted continuation of `tokens`, verified next
        block_s = 0.0  # the draft's seconds for it
        while True:
            # 2. Record the step and extend the sequence; stop at end-of-text or the length limit.
            if window.record(stats, step, rows):
                break
            # 3. The draft drafts ahead, as if `block` is kept whole (nothing follows an
            #    end-of-text), while 4. the main verifies the last token plus `block`.
            cap = 0 if block and block[-1] in eos else ahead_cap(schedule, len(block))
            job = worker.submit(drafter, [*tokens, *block], cap, eos)
            t1 = clock(device)
            rows = verify(tokens[:-1], [tokens[-1], *block], len(block) + 1)
            t2 = clock(device)
            worker.stop()
            ahead, ahead_s = job.result()  # waits for the draft's forward in flight, if any
            t3 = clock(device)
            # 5. Accept the longest agreeing prefix, then the main's own token.
            room = max_length - len(tokens)
            step = accept(block, rows.argmax(-1).tolist(), eos, room)
            n_kept = len(tokens) + len(step_tokens(step))
            # the draft's guess was the main's token: what it drafted after it is the next block
            whole = step.n_accepted == len(block) and step.main_token is not None
            guessed = whole and ahead[:1] == [step.main_token]
            next_block = ahead[1 : max(1, max_length - n_kept)] if guessed else []
            # 6. Roll both caches back to the kept tokens (and the draft's to its next block).
            crop_cache(cache, n_kept - 1)
            drafter.accept(n_kept - 1 + len(next_block))
            stats.draft_s += t3 - t2  # the draft on the critical path: the main waited for it
            stats.draft_overlapped_s += max(0.0, ahead_s - (t3 - t2))
            schedule.update(len(block), step.n_accepted, block_s, t2 - t1)
            block, block_s = next_block, ahead_s
    return window.output(generation_config)


def parallel_loop(
    drafter: Drafter,
    schedule: GammaSchedule,
    stats: LoopStats,
    generator: torch.Generator | None = None,
) -> Callable[..., Any]:
    """The `custom_generate` callable that runs `parallel_decode` (one window, batch 1)."""
    return own_loop(drafter, schedule, stats, generator, window=parallel_decode)
