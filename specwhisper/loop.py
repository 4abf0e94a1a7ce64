"""Our speculative loop: one 30 s window, greedy or sampled, batch size 1, as a drop-in for the
token loop of transformers' `generate`.

Whisper's own `generate` does everything around it (language detection, prompts, logits
processors, long-form windows), then hands the token loop to `speculative_decode` through its
`custom_generate` hook (`own_loop`). The main model verifies every token, so greedy output
equals the baseline's by construction, and sampled output has the baseline's distribution
(speculative sampling); each step is recorded so the steps replay to the output.

It does not draft (see drafters), choose gamma (see schedule) or time whole runs (see timing).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from specwhisper import packed
from specwhisper.drafters import Drafter, crop_cache, draw
from specwhisper.schedule import GammaSchedule, draft_stops_early
from specwhisper.timing import clock


@dataclass(frozen=True)
class DraftStep:
    """One step of the loop: what was drafted and what the main model kept.

    The step's tokens are `drafted[:n_accepted]` followed by `main_token`, so replaying every
    step gives the generated tokens (end-of-text included when the run ended on it). The prefill
    step drafts nothing. `main_token` is None when the step ended inside its accepted draft: on
    a drafted end-of-text, or at the length limit.
    """

    drafted: tuple[int, ...]  # proposed token ids (empty when drafting was paused, or prefill)
    n_accepted: int  # leading drafted tokens kept
    main_token: int | None  # the main model's own token: a correction, or the bonus


@dataclass
class LoopStats:
    """What the loop reports with its tokens: every step, and where the time went."""

    steps: list[DraftStep] = field(default_factory=list)
    draft_s: float = 0.0  # total time inside the drafter, device synced
    # parallel drafting: the drafter's time hidden behind main passes (draft_s is what the
    # main waited for)
    draft_overlapped_s: float = 0.0
    n_windows: int = 0  # windows decoded (one call per 30 s window, and per fallback retry)
    # hides the drafter's forwards from the main's forward counter (a main drafting for itself)
    drafting: Callable[[], Any] = contextlib.nullcontext


def accept(drafted: list[int], choice: list[int], eos: set[int], room: int) -> DraftStep:
    """The greedy accept rule: the longest prefix where draft == main, then the main's own
    token."""
    n_agree = 0
    while n_agree < len(drafted) and drafted[n_agree] == choice[n_agree]:
        n_agree += 1
    return kept_step(drafted, n_agree, choice[n_agree], eos, room)


def accept_sampled(
    drafted: list[int],
    q: torch.Tensor,
    p: torch.Tensor,
    eos: set[int],
    room: int,
    generator: torch.Generator | None,
) -> DraftStep:
    """The speculative sampling rule (Leviathan et al. 2023, Chen et al. 2023), lossless in
    distribution: keep drafted token x_i with probability min(1, p_i(x) / q_i(x)); at the first
    rejection the main's token is drawn from normalize(max(0, p_i - q_i)); after a full accept,
    from p_n. `q` [len(drafted), V] and `p` [len(drafted) + 1, V] are probabilities."""
    n = 0
    while n < len(drafted):
        x = drafted[n]
        u = torch.rand((), generator=generator, device=p.device)
        if u * q[n, x] > p[n, x]:  # reject: u >= p/q
            break
        n += 1
    dist = p[n]
    if n < len(drafted):
        residual = (p[n] - q[n]).clamp(min=0)
        dist = residual if residual.sum() > 0 else p[n]
    token = draw(dist, generator)
    return kept_step(drafted, n, token, eos, room)


def kept_step(drafted: list[int], n_kept: int, token: int, eos: set[int], room: int) -> DraftStep:
    """The step that keeps drafted[:n_kept] and then the main's `token`, ending early on
    end-of-text (nothing follows it) or when `room` tokens are reached."""
    new = [*drafted[:n_kept], token]
    end = next((i + 1 for i, t in enumerate(new) if t in eos), len(new))
    keep = min(end, room)
    if keep <= n_kept:  # ended inside the accepted draft: no token of the main's
        return DraftStep(tuple(drafted), keep, None)
    return DraftStep(tuple(drafted), n_kept, token)


def step_tokens(step: DraftStep) -> list[int]:
    """The tokens a step added to the sequence."""
    main = [] if step.main_token is None else [step.main_token]
    return [*step.drafted[: step.n_accepted], *main]


@dataclass
class Window:
    """The sequence of one window as the loop grows it, and what `generate` handed the loop."""

    tokens: list[int]  # the prompt, then every kept token
    cache: Any  # the main's cache
    encoder_hidden: torch.Tensor  # [1, S, D]
    eos: set[int]
    max_length: int
    # the processed logits of every kept token, when generate asks (Whisper's fallback checks)
    scores: list[torch.Tensor] | None

    @classmethod
    def open(
        cls, input_ids: torch.Tensor, generation_config: Any, model_kwargs: dict[str, Any]
    ) -> Window:
        if input_ids.shape[0] != 1:
            raise ValueError("speculative decoding runs at batch size 1")
        eos = generation_config._eos_token_tensor
        want_scores = getattr(generation_config, "output_scores", False)
        return cls(
            tokens=input_ids[0].tolist(),
            cache=model_kwargs["past_key_values"],
            encoder_hidden=model_kwargs["encoder_outputs"].last_hidden_state,
            eos=set() if eos is None else set(eos.tolist()),
            max_length=generation_config.max_length,
            scores=[] if want_scores else None,
        )

    def record(self, stats: LoopStats, step: DraftStep, rows: torch.Tensor) -> bool:
        """Record the step and extend the sequence (row i scored its i-th token); True once
        the window has ended, at end-of-text or the length limit."""
        stats.steps.append(step)
        self.tokens.extend(step_tokens(step))
        if self.scores is not None:
            self.scores.extend(rows[i : i + 1] for i in range(len(step_tokens(step))))
        return self.tokens[-1] in self.eos or len(self.tokens) >= self.max_length

    def output(self, generation_config: Any) -> Any:
        """What transformers' loop returns: the sequences, or an output object."""
        from transformers.generation.utils import GenerateEncoderDecoderOutput

        sequences = torch.tensor([self.tokens], device=self.encoder_hidden.device)
        if generation_config.return_dict_in_generate:
            return GenerateEncoderDecoderOutput(
                sequences=sequences,
                scores=None if self.scores is None else tuple(self.scores),
                past_key_values=self.cache,
            )
        return sequences


def speculative_decode(
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
    """Speculative decoding of one window; a drop-in for transformers' assisted loop.

    Called by `generate` with the prompt in `input_ids` [1, T0], the logits processors Whisper
    built (with the sampling warpers when `generation_config.do_sample`), and the encoder
    outputs and cache in `model_kwargs`. Greedy: identical tokens. Sampling: the same
    distribution, drawn with `generator`. Returns what transformers' loop returns (sequences,
    or an output object).
    """
    window = Window.open(input_ids, generation_config, model_kwargs)
    device, cache, eos, max_length = input_ids.device, window.cache, window.eos, window.max_length
    encoder_hidden, tokens = window.encoder_hidden, window.tokens
    processors = list(logits_processor)
    verify = verifier(main, cache, encoder_hidden, processors)
    sampling = bool(getattr(generation_config, "do_sample", False))
    stops = draft_stops_early("specwhisper", schedule.kind, sampling=sampling, batched=False)
    stop_below = schedule.stop_below if stops else 0.0  # the draft stops after a token under it

    def process(prefix: list[int], logits: torch.Tensor) -> torch.Tensor:
        return process_logits(processors, torch.tensor([prefix], device=device), logits)

    def pick(logits: torch.Tensor) -> int:
        if not sampling:
            return int(logits.argmax())
        return draw(torch.softmax(logits, -1), generator)

    stats.n_windows += 1
    with torch.inference_mode():
        # 1. Prefill: the main reads the prompt and gives the first token, as the baseline does.
        #    Its time (which includes the cross-attention K/V) is not a verify cost: not timed.
        rows = verify([], tokens, 1)
        step = DraftStep((), 0, pick(rows[0]))
        if not schedule.never_drafts:  # a drafter's set-up (a seq2seq one's encoder) is drafting
            drafter.begin(encoder_hidden, cache, inputs_tensor)
        while True:
            # 2. Record the step and extend the sequence; stop at end-of-text or the length limit.
            if window.record(stats, step, rows):
                break
            # 3. Draft up to gamma tokens, leaving room for the main's own token (0: does not pay).
            gamma = max(0, min(schedule.next(stops), max_length - len(tokens) - 1))
            t0 = clock(device)
            drafted, q = [], None
            with stats.drafting():
                if gamma > 0 and sampling:
                    drafted, q = drafter.sample(tokens, gamma, process, generator)
                elif gamma > 0:  # up to gamma, ending early where the draft is unsure
                    drafted = drafter.propose(tokens, gamma, stop_below)
            t1 = clock(device)
            # 4. Verify: one main pass over the last token plus the draft -> [g+1, V] logits.
            rows = verify(tokens[:-1], [tokens[-1], *drafted], len(drafted) + 1)
            t2 = clock(device)
            # 5. Accept the longest agreeing prefix (sampling: each with probability min(1, p/q)),
            #    then the main's own token.
            room = max_length - len(tokens)
            if sampling:
                p = torch.softmax(rows, -1)
                step = accept_sampled(drafted, q, p, eos, room, generator)
            else:
                step = accept(drafted, rows.argmax(-1).tolist(), eos, room)
            # 6. Roll both caches back to the kept tokens (the newest one is not fed yet).
            n_valid = len(tokens) + len(step_tokens(step)) - 1
            crop_cache(cache, n_valid)
            drafter.accept(n_valid)
            stats.draft_s += t1 - t0
            # the draft stopped itself, unsure of its last token (not at end-of-text or gamma)
            unsure = stop_below > 0 and 0 < len(drafted) < gamma and drafted[-1] not in eos
            schedule.update(len(drafted), step.n_accepted, t1 - t0, t2 - t1, unsure)
    return window.output(generation_config)


def verifier(
    main: torch.nn.Module, cache: Any, encoder_hidden: torch.Tensor, processors: list[Any]
) -> Callable[[list[int], list[int], int], torch.Tensor]:
    """verify(before, fed, n_last): a main pass over `fed` (the cache already holds `before`);
    the processed logits of the last n_last positions, [n_last, V]. Position i's processors see
    before + fed[: i + 1], as the baseline's do one step at a time."""
    project = projection(main)
    packed.install(main.model.decoder)

    def verify(before: list[int], fed: list[int], n_last: int) -> torch.Tensor:
        device = encoder_hidden.device
        with packed.rows_pass():
            hidden = main.model.decoder(
                input_ids=torch.tensor([fed], device=device),
                encoder_hidden_states=encoder_hidden,
                past_key_values=cache,
                use_cache=True,
            ).last_hidden_state  # [1, K, D]
        logits = project(hidden[0, -n_last:]).float()  # [n_last, V]
        prefix = torch.tensor([before + fed], device=device)  # [1, T]
        return process_logits(processors, prefix, logits)

    return verify


def projection(main: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """hidden [..., K, D] -> logits [..., K, V]. On CPU in fp32 the output matrix (106 MB for
    Whisper's vocabulary at d_model 512) is held twice more: one row multiplies a [D, V] copy,
    made once (MKL's fastest one-row path; generate's [V, D] Linear reads it more slowly), and
    several rows in all (a verify pass, a batch) go through oneDNN's packed copy, made on the
    first such call (packed.packed_copy), which reads it once for all rows. Each logit is the
    same dot product either way; only its rounding can differ, by a few ulps."""
    weight = main.proj_out.weight
    if weight.device.type != "cpu":
        return main.proj_out
    cached = getattr(main, "_specwhisper_proj_t", None)
    if cached is None or cached[0] is not weight:
        cached = (weight, weight.detach().t().contiguous())
        main._specwhisper_proj_t = cached
    proj_t = cached[1]

    def project(hidden: torch.Tensor) -> torch.Tensor:  # [..., D]: rows of any batch shape
        if weight.dtype == torch.float32 and packed.wanted(hidden):
            return packed.linear(hidden, packed.packed_copy(main.proj_out), None)
        return hidden @ proj_t

    return project


def process_logits(
    processors: list[Any], prefix: torch.Tensor, logits: torch.Tensor
) -> torch.Tensor:
    """Apply generate's logits processors to the logits of the last n positions of `prefix`
    ([1, T] ids, [n, V] logits), as the baseline applies them one step at a time: row i sees
    the prefix up to and including its own position.

    Whisper's two suppression processors are applied without the per-row loop and with their
    mask built once per call of generate, with the same result: token suppression does not
    depend on the prefix (one mask for the block), and begin suppression only acts on the row
    whose prefix length is its begin index. (Each of transformers' calls rebuilds the mask with
    `torch.isin` over the vocabulary: a few ms, which a sampling draft would pay per token.)
    """
    from transformers.generation.logits_process import (
        SuppressTokensAtBeginLogitsProcessor,
        SuppressTokensLogitsProcessor,
    )

    n = logits.shape[0]
    first = prefix.shape[1] - n + 1  # prefix length seen by row 0
    for p in processors:
        if type(p) is SuppressTokensLogitsProcessor:
            logits = torch.where(_suppress_mask(p, p.suppress_tokens, logits), -math.inf, logits)
        elif type(p) is SuppressTokensAtBeginLogitsProcessor:
            mask = _suppress_mask(p, p.begin_suppress_tokens, logits)
            for i in range(n):
                if first + i == p.begin_index:
                    logits[i] = torch.where(mask, -math.inf, logits[i])
        else:
            for i in range(n):
                logits[i] = p(prefix[:, : first + i], logits[i : i + 1])[0]
    return logits


def _suppress_mask(processor: Any, tokens: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """[V] bool: the processor's suppressed tokens, as its own call computes them, built once
    and kept on the processor (which lives for one call of generate)."""
    mask = getattr(processor, "_specwhisper_mask", None)
    if mask is None or mask.shape[0] != logits.shape[-1] or mask.device != logits.device:
        vocab = torch.arange(logits.shape[-1], device=logits.device)
        mask = torch.isin(vocab, tokens.to(logits.device))
        processor._specwhisper_mask = mask
    return mask


def custom_generate(decode: Callable[..., Any]) -> Callable[..., Any]:
    """A `custom_generate` callable for `generate`: it builds everything as for the baseline
    (greedy or sampling mode, the same logits processors and cache) and hands the token loop to
    `decode(model, input_ids, logits_processor, generation_config, inputs_tensor=..., **kw)`,
    without the arguments only generate's own loops use. Our loops end on end-of-text and the
    length limit themselves, so generate's stopping criteria (the same two conditions) are not
    used."""

    def loop(
        model,
        input_ids,
        logits_processor,
        stopping_criteria,
        generation_config,
        inputs_tensor=None,  # named, so generate passes it (it checks the signature)
        **kwargs,
    ):
        for key in (
            "synced_gpus",
            "streamer",
            "assistant_model",
            "tokenizer",
            "assistant_tokenizer",
        ):
            kwargs.pop(key, None)
        return decode(
            model,
            input_ids,
            logits_processor,
            generation_config,
            inputs_tensor=inputs_tensor,
            **kwargs,
        )

    return loop


def own_loop(
    drafter: Drafter,
    schedule: GammaSchedule,
    stats: LoopStats,
    generator: torch.Generator | None = None,
    window: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """The `custom_generate` callable that runs `window` on each 30 s window (batch 1):
    `speculative_decode` unless given another loop of the same signature (parallel)."""
    run_window = window or speculative_decode

    def decode(model, input_ids, logits_processor, generation_config, **kwargs):
        return run_window(
            model,
            drafter,
            schedule,
            stats,
            input_ids,
            logits_processor,
            generation_config,
            generator=generator,
            **kwargs,
        )

    return custom_generate(decode)
