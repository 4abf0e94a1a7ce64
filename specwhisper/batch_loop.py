"""Batched speculative decoding: several clips of up to 30 s at once, rows that advance at their
own rate.

transformers refuses an assistant at batch size > 1. Here each row drafts, is verified and keeps
its own accepted prefix, all rows in one draft pass per draft token and one main pass per step.
Rows therefore hold different numbers of tokens. They share one cache whose columns are tagged,
per row, with the position they hold (-1: nothing, a draft token that row rejected or a pad);
each query sees the columns of its row at positions up to its own (`RaggedDecoder`). A finished
row leaves the batch, so it stops costing work. One draft length per step serves the whole
batch, chosen by the same cost model as at batch size 1 (schedule), and 0 (plain batched
decoding) when drafting does not pay. Greedy only: every row's tokens are the ones the main's
own greedy choice gives that row.

Whisper's `generate` still does everything around the token loop (features, language tokens,
logits processors), so the batched baseline is plain `generate` on the same batch. This module
does not load checkpoints or read audio (see loading, audio), and does not compare or time the
two (batch mode, with its rows and batch sizes, is specwhisper.batch_mode).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from specwhisper import metrics, packed
from specwhisper.audio import SAMPLE_RATE
from specwhisper.checkpoints import SELF_INT8
from specwhisper.decoding import WINDOW_S, n_prompt_tokens
from specwhisper.drafters import draft_vocabulary
from specwhisper.int8_forward import lean_cache, lean_forward, lean_weights, main_cross_keys_values
from specwhisper.loading import Loaded
from specwhisper.loop import (
    DraftStep,
    accept,
    custom_generate,
    process_logits,
    projection,
    step_tokens,
)
from specwhisper.schedule import DEFAULT_GAMMA, GammaSchedule, draft_stops_early
from specwhisper.timing import ForwardMeter, clock, timed

BATCH_ONLY_GREEDY = (
    "Batch mode decodes greedily (temperature 0): speculative sampling runs one clip at a time."
)


class RaggedDecoder:
    """A Whisper decoder over a batch whose rows hold different numbers of tokens.

    The cache's columns are shared; `pos` [B, C] says which position each column holds for each
    row (-1: none). A query at position p sees its row's columns holding positions 0..p, so a
    rejected draft token, or a pad, is simply never seen again; columns no row holds any more
    are cropped from the end.
    """

    def __init__(
        self,
        decoder: torch.nn.Module,
        cache: Any,
        encoder_hidden: torch.Tensor,  # [B, S, D]
        max_positions: int,
    ):
        self.decoder, self.cache, self.encoder_hidden = decoder, cache, encoder_hidden
        self.max_positions = max_positions
        packed.install(decoder)
        n_rows, device = encoder_hidden.shape[0], encoder_hidden.device
        self.pos = torch.empty(n_rows, 0, dtype=torch.long, device=device)  # [B, C]
        self.length = torch.zeros(n_rows, dtype=torch.long, device=device)  # [B] tokens held

    def feed(self, ids: list[list[int]]) -> torch.Tensor:
        """Feed each row its own tokens (any number, 0 included) at its next positions; return
        the hidden states [B, K, D], K the longest row's count (later slots of a row are pads)."""
        device = self.encoder_hidden.device
        padded, n_fed = _padded(ids, device)  # [B, K], [B]
        offsets = torch.arange(padded.shape[1], device=device)
        positions = self.length[:, None] + offsets  # [B, K]
        real = offsets[None] < n_fed[:, None]
        query_pos = positions.clamp(max=self.max_positions - 1)  # pads: any valid position
        key_pos = torch.cat([self.pos, torch.where(real, positions, -1)], dim=1)  # [B, C + K]
        allowed = (key_pos[:, None, :] >= 0) & (key_pos[:, None, :] <= query_pos[:, :, None])
        n_old = self.pos.shape[1]
        allowed[:, offsets, n_old + offsets] = True  # a pad query sees itself: no empty row
        dtype = self.encoder_hidden.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
        mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]  # [B, 1, K, C + K]
        with packed.rows_pass():
            hidden = self.decoder(
                input_ids=padded,
                encoder_hidden_states=self.encoder_hidden,
                past_key_values=self.cache,
                attention_mask=mask,
                position_ids=query_pos,
                use_cache=True,
            ).last_hidden_state  # [B, K, D]
        self.pos, self.length = key_pos, self.length + n_fed
        return hidden

    def truncate(self, n_valid: list[int]) -> None:
        """Only each row's first n_valid tokens are final: forget the rest, and crop columns
        that no row holds any more from the end of the cache."""
        keep = torch.tensor(n_valid, device=self.pos.device)
        self.pos = torch.where(self.pos >= keep[:, None], -1, self.pos)
        self.length = torch.minimum(self.length, keep)
        held = (self.pos >= 0).any(0).nonzero()
        n_cols = int(held[-1]) + 1 if len(held) else 0
        extra = self.pos.shape[1] - n_cols
        if extra > 0:
            self.cache.crop(-extra)
            self.pos = self.pos[:, :n_cols]

    def keep_rows(self, rows: list[int]) -> None:
        """Only `rows` (indices into the current batch) go on; the others leave the batch."""
        index = torch.tensor(rows, dtype=torch.long, device=self.pos.device)
        self.cache.batch_select_indices(index)
        self.encoder_hidden = self.encoder_hidden[index]
        self.pos, self.length = self.pos[index], self.length[index]


def _padded(ids: list[list[int]], device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of different lengths as [B, K] ids (zeros past a row's end, K >= 1) and their
    lengths [B]."""
    n_fed = torch.tensor([len(row) for row in ids], device=device)
    padded = torch.zeros(len(ids), max(1, int(n_fed.max())), dtype=torch.long, device=device)
    for b, row in enumerate(ids):
        padded[b, : len(row)] = torch.tensor(row, dtype=torch.long)
    return padded, n_fed


def empty_cache() -> Any:
    from transformers import DynamicCache, EncoderDecoderCache

    return EncoderDecoderCache(DynamicCache(), DynamicCache())


class BatchLogitsDrafter:
    """Shared greedy proposing for batched drafters: subclasses keep `held` (tokens each row
    has in the draft's cache) and give `next_logits(feed) -> [B, V]`, the logits after each row's
    last fed token (any row for a row fed nothing)."""

    suppress: torch.Tensor  # [V] bool: never proposed
    eos: frozenset[int]

    def held(self) -> list[int]:
        raise NotImplementedError

    def next_logits(self, feed: list[list[int]]) -> torch.Tensor:
        raise NotImplementedError

    @torch.inference_mode()
    def propose(self, tokens: list[list[int]], n: list[int]) -> list[list[int]]:
        """Continue each row's `tokens` by up to n[b] greedy draft tokens (fewer when a row
        drafts end-of-text); a row with n[b] == 0 drafts nothing and catches up later."""
        feed = [row[h:] if k > 0 else [] for row, h, k in zip(tokens, self.held(), n, strict=True)]
        drafted: list[list[int]] = [[] for _ in tokens]
        while any(feed):
            logits = self.next_logits(feed).float().masked_fill(self.suppress, -torch.inf)
            choice = logits.argmax(-1).tolist()
            fed, feed = feed, [[] for _ in tokens]
            for b in range(len(tokens)):
                if not fed[b]:
                    continue
                drafted[b].append(choice[b])
                if choice[b] not in self.eos and len(drafted[b]) < n[b]:
                    feed[b] = [choice[b]]  # the last drafted token is fed with the next catch-up
        return drafted


class BatchDrafter(BatchLogitsDrafter):
    """Any transformers Whisper model as a batched draft: seq2seq with its own encoder, or
    decoder-only (distil) reading the main's encoder outputs."""

    def __init__(
        self,
        draft: Loaded,
        suppress: torch.Tensor,  # [V] bool
        eos: frozenset[int],
        encoder_hidden: torch.Tensor,  # the main's [B, S, D]
        features: torch.Tensor,  # [B, n_mels, frames], the main's input
        main_cache: Any = None,  # unused: this draft keeps its own cross-attention
    ):
        model = draft.model
        if draft.checkpoint.decoder_only:
            states = encoder_hidden.to(draft.device, draft.dtype)
        else:  # draft.dtype, not model.dtype: with a bf16 encoder that reads bf16
            with torch.inference_mode():
                encoder = model.get_encoder()
                states = encoder(features.to(draft.device, draft.dtype)).last_hidden_state
        self.project = model.proj_out
        self.suppress, self.eos = suppress.to(draft.device), eos
        self.ragged = RaggedDecoder(
            model.model.decoder, empty_cache(), states, model.config.max_target_positions
        )

    def held(self) -> list[int]:
        return self.ragged.length.tolist()

    def next_logits(self, feed: list[list[int]]) -> torch.Tensor:
        hidden = self.ragged.feed(feed)  # [B, K, D]
        last = torch.tensor([max(len(f), 1) - 1 for f in feed], device=hidden.device)
        return self.project(hidden[torch.arange(len(feed)), last])  # [B, V]

    def accept(self, n_valid: list[int]) -> None:
        self.ragged.truncate(n_valid)

    def keep_rows(self, rows: list[int]) -> None:
        self.ragged.keep_rows(rows)


class Int8BatchDrafter(BatchLogitsDrafter):
    """The self-int8 draft, batched: int8_forward.lean_forward (fused int8 QKV, a copy of the main's
    cross-attention keys/values in `cross_dtype()`, a preallocated cache) with a row per clip,
    each at its own positions. Each row gets what the batch-of-one lean draft computes for it,
    but for the int8 rounding that the rows share (see lean_forward)."""

    def __init__(
        self,
        draft: Loaded,
        suppress: torch.Tensor,
        eos: frozenset[int],
        encoder_hidden: torch.Tensor,
        features: torch.Tensor,
        main_cache: Any,  # the main's cache after prefill: its cross-attention keys/values
    ):
        self.w = lean_weights(draft.model)
        self.suppress, self.eos = suppress, eos
        n_rows, max_len = encoder_hidden.shape[0], draft.model.config.max_target_positions
        # Zeros, not empty: a row reads every position below the batch's longest (masked past
        # its own count), and masking does not make uninitialized memory harmless: a NaN or
        # inf value there times a zero attention weight is NaN, and a NaN activation makes the
        # int8 layers' dynamic quantization fail ("min should be less than or equal to max").
        self.k, self.v = lean_cache(self.w, n_rows, max_len, torch.zeros)
        self.cross = main_cross_keys_values(main_cache)
        self.n = torch.zeros(n_rows, dtype=torch.long)  # [B] tokens in each row's cache

    def held(self) -> list[int]:
        return self.n.tolist()

    def next_logits(self, feed: list[list[int]]) -> torch.Tensor:
        logits = lean_forward(self.w, self.k, self.v, self.cross, feed, self.held())
        self.n = self.n + torch.tensor([len(row) for row in feed])
        return logits

    def accept(self, n_valid: list[int]) -> None:
        self.n = torch.minimum(self.n, torch.tensor(n_valid))

    def keep_rows(self, rows: list[int]) -> None:
        index = torch.tensor(rows, dtype=torch.long)
        self.k, self.v = self.k[:, index], self.v[:, index]
        self.cross = [(kt[index], v[index]) for kt, v in self.cross]
        self.n = self.n[index]


def make_batch_drafter(assistant: Loaded, *args: Any) -> BatchLogitsDrafter:
    """The batched drafter for this assistant: the lean int8 one for self-int8."""
    if assistant.checkpoint.id == SELF_INT8:
        return Int8BatchDrafter(assistant, *args)
    return BatchDrafter(assistant, *args)


@dataclass
class BatchStats:
    """What the batched loop reports: each row's steps, and the batch's passes and times."""

    steps: list[list[DraftStep]] = field(default_factory=list)  # per row of the batch
    n_main_forwards: int = 0  # main decoder forwards over the batch (prefill included)
    draft_s: float = 0.0  # time inside the draft, device synced


def batched_speculative_decode(
    main: torch.nn.Module,
    make_drafter: Callable[[torch.Tensor, torch.Tensor, Any], BatchLogitsDrafter],
    schedule: GammaSchedule,
    stats: BatchStats,
    input_ids: torch.LongTensor,
    logits_processor: Any,
    generation_config: Any,
    *,
    inputs_tensor: torch.Tensor | None = None,
    **model_kwargs: Any,
) -> Any:
    """Greedy speculative decoding of a batch of windows; a drop-in for generate's token loop.

    `input_ids` [B, T0] holds each row's prompt. Returns the sequences [B, T] (prompt included,
    finished rows padded with the pad token), as generate's greedy loop does.
    """
    from transformers.generation.utils import GenerateEncoderDecoderOutput

    if getattr(generation_config, "do_sample", False):
        raise ValueError(BATCH_ONLY_GREEDY)
    device = input_ids.device
    encoder_hidden = model_kwargs["encoder_outputs"].last_hidden_state  # [B, S, D]
    eos = generation_config._eos_token_tensor
    eos = set() if eos is None else set(eos.tolist())
    max_length = generation_config.max_length
    processors = list(logits_processor)
    project = projection(main)
    max_positions = main.config.max_target_positions
    verifier = RaggedDecoder(
        main.model.decoder, model_kwargs["past_key_values"], encoder_hidden, max_positions
    )
    tokens = input_ids.tolist()  # every row's sequence, finished rows included
    stats.steps = [[] for _ in tokens]

    def choose(rows: list[int], fed: list[list[int]], hidden: torch.Tensor) -> list[list[int]]:
        """The main's greedy tokens after each position fed, with generate's processors applied
        to each row's own prefix."""
        logits = project(hidden).float()  # [R, K, V]
        out = []
        for i, row in enumerate(rows):
            n = len(fed[i])
            prefix = torch.tensor([tokens[row] + fed[i][1:]], device=device)
            out.append(process_logits(processors, prefix, logits[i, :n]).argmax(-1).tolist())
        return out

    with torch.inference_mode():
        # 1. Prefill: the main reads every prompt and gives each row its first token.
        hidden = verifier.feed(tokens)
        stats.n_main_forwards += 1
        active = list(range(len(tokens)))  # rows still decoding, in batch order
        prompt_ends = [[row[-1]] for row in tokens]  # what the last position read
        steps = [DraftStep((), 0, c[0]) for c in choose(active, prompt_ends, hidden[:, -1:])]
        drafter = make_drafter(encoder_hidden, inputs_tensor, model_kwargs["past_key_values"])
        while True:
            # 2. Record each row's step; a row that reached end-of-text or the length limit
            #    leaves the batch.
            going = []
            for i, row in enumerate(active):
                stats.steps[row].append(steps[i])
                tokens[row].extend(step_tokens(steps[i]))
                if tokens[row][-1] not in eos and len(tokens[row]) < max_length:
                    going.append(i)
            if not going:
                break
            if len(going) < len(active):
                verifier.keep_rows(going)
                drafter.keep_rows(going)
                active = [active[i] for i in going]
            # 3. Draft one length for the batch, each row leaving room for the main's token.
            gamma = max(0, schedule.next())
            want = [max(0, min(gamma, max_length - len(tokens[r]) - 1)) for r in active]
            t0 = clock(device)
            drafted = [[] for _ in active]
            if max(want) > 0:
                drafted = drafter.propose([tokens[r] for r in active], want)
            t1 = clock(device)
            # 4. Verify: one main pass over each row's last token plus its draft.
            fed = [[tokens[r][-1], *d] for r, d in zip(active, drafted, strict=True)]
            choices = choose(active, fed, verifier.feed(fed))
            t2 = clock(device)
            stats.n_main_forwards += 1
            # 5. Each row keeps its longest agreeing prefix, then the main's own token.
            steps = [
                accept(d, c, eos, max_length - len(tokens[r]))
                for r, d, c in zip(active, drafted, choices, strict=True)
            ]
            # 6. Roll both caches back to each row's kept tokens (the newest is not fed yet).
            n_valid = [
                len(tokens[r]) + len(step_tokens(s)) - 1 for r, s in zip(active, steps, strict=True)
            ]
            verifier.truncate(n_valid)
            drafter.accept(n_valid)
            stats.draft_s += t1 - t0
            schedule.update_batch(
                [len(d) for d in drafted], [s.n_accepted for s in steps], t1 - t0, t2 - t1
            )
    pad = generation_config.pad_token_id
    pad = next(iter(eos)) if pad is None else int(pad)
    width = max(len(t) for t in tokens)
    sequences = torch.tensor([t + [pad] * (width - len(t)) for t in tokens], device=device)
    if generation_config.return_dict_in_generate:
        return GenerateEncoderDecoderOutput(sequences=sequences)
    return sequences


# ---------------------------------------------------------------------------------------------
# Entry points: the batched baseline and the batched speculative run on the same batch


@dataclass(frozen=True)
class BatchResult:
    """One batched run: every row's tokens and text, and the batch's time."""

    token_ids: tuple[tuple[int, ...], ...]  # per row: generated tokens, no prompt, no end-of-text
    texts: tuple[str, ...]
    time_s: float  # wall time of the generate call over the whole batch (encoder included)
    engine: str  # "generate" (the batched baseline) or "specwhisper"
    n_main_forwards: int  # main decoder forwards over the batch (prefill included)
    n_draft_tokens: int = 0  # tokens proposed, all rows
    n_accepted: int = 0
    draft_s: float = 0.0
    steps: tuple[tuple[DraftStep, ...], ...] = ()  # per row, per step

    @property
    def batch_size(self) -> int:
        return len(self.token_ids)

    @property
    def n_tokens(self) -> int:
        return sum(len(t) for t in self.token_ids)

    @property
    def acceptance_rate(self) -> float:
        return metrics.acceptance_rate([self])


@dataclass(frozen=True)
class BatchFeatures:
    """Log-mel input for a batch, each row one window of up to 30 s."""

    input_features: torch.Tensor  # [B, n_mels, frames]
    languages: tuple[str | None, ...]  # per row; None: detect (multilingual) or English-only
    durations_s: tuple[float, ...]


def prepare_batch(
    main: Loaded, clips: list[np.ndarray], languages: list[str | None] | None = None
) -> BatchFeatures:
    """Features for clips of up to 30 s each, padded to the window as Whisper expects."""
    if not clips:
        raise ValueError("A batch needs at least one clip.")
    durations = tuple(len(c) / SAMPLE_RATE for c in clips)
    if max(durations) > WINDOW_S + 1e-6:
        raise ValueError(
            f"Batch mode takes clips of up to {WINDOW_S:.0f} s each; cut longer audio into "
            "30 s chunks first (audio.chunk)."
        )
    out = main.processor(list(clips), sampling_rate=SAMPLE_RATE, return_tensors="pt")
    features = out.input_features.to(main.device, main.dtype)
    langs = tuple(languages) if languages is not None else (None,) * len(clips)
    if len(langs) != len(clips):
        raise ValueError("Give one language per clip.")
    return BatchFeatures(features, langs, durations)


def _batch_kwargs(main: Loaded, batch: BatchFeatures, max_new_tokens: int | None) -> dict:
    kwargs: dict[str, Any] = dict(do_sample=False, num_beams=1)
    if max_new_tokens is not None:
        kwargs["max_new_tokens"] = max_new_tokens
    if getattr(main.model.generation_config, "is_multilingual", False):
        langs = batch.languages
        if all(lang is not None for lang in langs):
            kwargs |= dict(language=list(langs), task="transcribe")
        elif any(lang is not None for lang in langs):
            raise ValueError("Give every clip of a batch a language, or none (auto-detect).")
    return kwargs


def _finish_batch(main: Loaded, sequences: torch.Tensor, **fields: Any) -> BatchResult:
    config = main.model.generation_config
    ends = {config.pad_token_id, config.eos_token_id}
    rows = []
    for seq in sequences.tolist():
        ids = [int(t) for t in seq]
        ids = ids[n_prompt_tokens(ids, config) :]
        end = next((i for i, t in enumerate(ids) if t in ends), len(ids))
        rows.append(tuple(ids[:end]))
    texts = tuple(main.processor.decode(list(r), skip_special_tokens=True).strip() for r in rows)
    return BatchResult(token_ids=tuple(rows), texts=texts, **fields)


def _sequences(output: Any) -> torch.Tensor:
    return output["sequences"] if isinstance(output, dict) else output


def decode_batch_baseline(
    main: Loaded, batch: BatchFeatures, max_new_tokens: int | None = None
) -> BatchResult:
    """Plain batched greedy `generate`: the reference every row is held to."""
    kwargs = _batch_kwargs(main, batch, max_new_tokens)
    with ForwardMeter(main.model.model.decoder, main.device) as meter, torch.inference_mode():
        output, seconds = timed(
            lambda: main.model.generate(batch.input_features, **kwargs), main.device
        )
    return _finish_batch(
        main, _sequences(output), time_s=seconds, engine="generate", n_main_forwards=meter.n_calls
    )


def decode_batch_speculative(
    main: Loaded,
    assistant: Loaded,
    batch: BatchFeatures,
    *,
    gamma: int = DEFAULT_GAMMA,
    gamma_schedule: str = "adaptive",
    max_gamma: int = 12,
    max_new_tokens: int | None = None,
) -> BatchResult:
    """The same batched `generate` call, with its token loop swapped for our batched loop."""
    kwargs = _batch_kwargs(main, batch, max_new_tokens)
    stops = draft_stops_early("specwhisper", gamma_schedule, sampling=False, batched=True)
    confidence = None if stops else 0.0  # no confidence stop: batched drafts run their gamma
    schedule = GammaSchedule(
        gamma_schedule, max(gamma, 0), max(max_gamma, 1), confidence=confidence
    )
    stats = BatchStats()
    suppress, eos = draft_vocabulary(main)

    def make(
        encoder_hidden: torch.Tensor, features: torch.Tensor, cache: Any
    ) -> BatchLogitsDrafter:
        return make_batch_drafter(assistant, suppress, eos, encoder_hidden, features, cache)

    def decode(model, input_ids, logits_processor, generation_config, **rest):
        return batched_speculative_decode(
            model, make, schedule, stats, input_ids, logits_processor, generation_config, **rest
        )

    kwargs["custom_generate"] = custom_generate(decode)
    with torch.inference_mode():
        output, seconds = timed(
            lambda: main.model.generate(batch.input_features, **kwargs), main.device
        )
    steps = tuple(tuple(s) for s in stats.steps)
    n_draft = sum(len(s.drafted) for row in steps for s in row)
    n_acc = sum(s.n_accepted for row in steps for s in row)
    return _finish_batch(
        main,
        _sequences(output),
        time_s=seconds,
        engine="specwhisper",
        n_main_forwards=stats.n_main_forwards,
        n_draft_tokens=n_draft,
        n_accepted=n_acc,
        draft_s=stats.draft_s,
        steps=steps,
    )
