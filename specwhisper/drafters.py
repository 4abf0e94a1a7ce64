"""Drafters: what proposes tokens for the main model to verify.

A drafter proposes greedy tokens through `propose` and is told what survived through `accept`;
it never decides what is kept (the loop and the main model do). Two kinds:
- `Int8SelfDrafter`: the main's own decoder with int8 Linear layers, run through a lean forward
  (fused int8 QKV, preallocated KV cache, the main's cross-attention keys/values reused).
  `lean_forward` takes a [B, K] batch, so batch mode's int8 drafter (batch_loop) runs the same one;
  the forward itself is int8_forward's.
- `HFDrafter`: any transformers Whisper model: seq2seq with its own encoder, or a decoder-only
  (distil) model reading the main's encoder outputs.

It does not load checkpoints (see loading) and does not verify tokens (see loop).
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import torch

from specwhisper.checkpoints import SELF_INT8, SELF_INT8_CPU_ONLY, Checkpoint, CheckpointError
from specwhisper.int8_forward import (
    cross_dtype,
    lean_cache,
    lean_forward,
    lean_weights,
    main_cross_keys_values,
)
from specwhisper.loading import CACHE, Loaded, ModelCache, dtype_name

# process(prefix ids, logits [1, V]) -> processed logits [1, V]: the main's logits processors
# (warpers included when sampling) for the position after `prefix`.
Process = Callable[[list[int], torch.Tensor], torch.Tensor]


class Drafter(Protocol):
    def begin(self, encoder_hidden: torch.Tensor, cache: Any, features: torch.Tensor) -> None:
        """A new window: reset state. `cache` is the main's cache after its prefill pass."""

    def propose(self, tokens: list[int], n: int, stop_below: float = 0.0) -> list[int]:
        """Greedily continue `tokens` (the whole sequence so far) by up to n draft tokens,
        stopping after one the draft gives less than `stop_below` probability."""

    def sample(
        self, tokens: list[int], n: int, process: Process, generator: torch.Generator | None
    ) -> tuple[list[int], torch.Tensor]:
        """Continue `tokens` by up to n tokens sampled from q, the draft's distribution after
        `process` (the main's logits processors and warpers); also return q's rows [n, V]."""

    def accept(self, n_valid: int) -> None:
        """Only the first n_valid tokens of the sequence are final; forget the rest."""


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token drawn from `probs` ([V], non-negative, any positive total) by the inverse CDF
    of one uniform number: the same distribution as `torch.multinomial`, at a fraction of its
    cost over Whisper's 51,865 tokens (about 4 ms a draw on this project's CPU, paid per draft
    token). A zero-probability token is never drawn: `right=True` skips the CDF's flat runs."""
    cdf = probs.double().cumsum(0)
    u = torch.rand((), generator=generator, device=probs.device, dtype=torch.float64) * cdf[-1]
    i = int(torch.searchsorted(cdf, u, right=True))
    if i >= probs.shape[0]:  # u rounded up to the total: the last token with any mass
        i = int(torch.nonzero(probs)[-1])
    return i


def probability(logits: torch.Tensor, token: int) -> float:
    """softmax(logits)[token] for logits [V], without the [V] probabilities."""
    logits = logits.float()
    return math.exp(float(logits[token] - torch.logsumexp(logits, 0)))


class LogitsDrafter:
    """Proposing and sampling shared by the batch-of-one drafters: subclasses give
    `_forward(ids) -> [V]`, the next-token logits after feeding `ids`, and keep `n` (tokens in
    their cache), `max_len`, `suppress` ([V] bool, never proposed) and `eos` (end-of-text ids:
    a draft stops after proposing one, since nothing follows it)."""

    n: int
    max_len: int
    suppress: torch.Tensor
    eos: frozenset[int]

    def _forward(self, ids: list[int]) -> torch.Tensor:
        raise NotImplementedError

    def propose(self, tokens: list[int], n: int, stop_below: float = 0.0) -> list[int]:
        n = min(n, self.max_len - len(tokens))
        drafted: list[int] = []
        if n <= 0:
            return drafted
        logits = self._forward(tokens[self.n :])  # catch up on tokens the main added
        for _ in range(n):
            masked = logits.masked_fill(self.suppress, -math.inf)  # [V]
            token = int(masked.argmax())
            drafted.append(token)
            if token in self.eos or len(drafted) == n:
                break
            # unsure: the main likely rejects it, and a draft token after it is wasted work
            if stop_below > 0 and probability(masked, token) < stop_below:
                break
            logits = self._forward([token])
        return drafted

    def sample(
        self, tokens: list[int], n: int, process: Process, generator: torch.Generator | None
    ) -> tuple[list[int], torch.Tensor]:
        n = min(n, self.max_len - len(tokens))
        drafted: list[int] = []
        rows: list[torch.Tensor] = []
        if n <= 0:
            return drafted, torch.empty(0)
        logits = self._forward(tokens[self.n :])
        for _ in range(n):
            masked = logits.float().masked_fill(self.suppress.to(logits.device), -math.inf)
            q = torch.softmax(process([*tokens, *drafted], masked[None])[0], dim=-1)
            token = draw(q, generator)
            drafted.append(token)
            rows.append(q)
            if token in self.eos or len(drafted) == n:
                break
            logits = self._forward([token])
        return drafted, torch.stack(rows)


# ---------------------------------------------------------------------------------------------
# The self-int8 draft model


def self_int8(main: Loaded, cache: ModelCache = CACHE) -> Loaded:
    """The self-int8 draft of `main`, built once per main and dtype and kept in `cache`."""
    if main.device.type != "cpu":
        raise CheckpointError(SELF_INT8_CPU_ONLY)  # a refusal: the cache stays as it is
    return cache.derived(SELF_INT8, main, build_self_int8)


def _float32_encoder_states(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple:
    """Forward pre-hook of the self-int8 decoder: int8 dynamic Linear layers take fp32 inputs
    only, while the main (in bf16 or fp16) hands over its encoder outputs in its own dtype."""
    states = kwargs.get("encoder_hidden_states")
    if states is not None and states.dtype != torch.float32:
        kwargs["encoder_hidden_states"] = states.float()
    return args, kwargs


def build_self_int8(main: Loaded) -> Loaded:
    """The main's own decoder with every Linear in int8 (per-channel, dynamic activations) and
    the tanh approximation of GELU.

    Returned as a WhisperForCausalLM so transformers' assisted generation can use it as a
    decoder-only assistant that reads the main's encoder outputs, exactly like a distil model.
    It computes in fp32 whatever the main's dtype: encoder outputs in another dtype are cast on
    the way in. CPU only: fbgemm int8 kernels have no CUDA counterpart.
    """
    from transformers import WhisperForCausalLM

    if main.device.type != "cpu":
        raise CheckpointError(SELF_INT8_CPU_ONLY)
    start = time.perf_counter()
    config = copy.deepcopy(main.model.config)
    config.architectures = ["WhisperForCausalLM"]
    config.dtype = torch.float32
    # tanh GELU: an approximation a draft can afford; exact GELU cost ~7x more per call here
    config.activation_function = "gelu_pytorch_tanh"
    draft = WhisperForCausalLM(config).eval()
    draft.model.decoder.load_state_dict(main.model.model.decoder.state_dict())
    draft.proj_out.weight = torch.nn.Parameter(main.model.proj_out.weight.detach().clone())
    draft.float()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization deprecation chatter
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        draft = quantize_dynamic(
            draft, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )
    draft.model.decoder.register_forward_pre_hook(_float32_encoder_states, with_kwargs=True)
    draft.generation_config = copy.deepcopy(main.model.generation_config)
    ckpt = Checkpoint(SELF_INT8, main.checkpoint.family, True, main.checkpoint.d_model, 0)
    load_s = time.perf_counter() - start
    return Loaded(ckpt, draft, None, load_s, main.device, torch.float32, main.revision)


# ---------------------------------------------------------------------------------------------
# The lean int8 forward of the self-int8 draft, for a batch of rows (one row at batch size 1)


class Int8SelfDrafter(LogitsDrafter):
    """The self-int8 draft run through the lean int8 forward (`lean_forward`) for one row.

    The same int8 weights, tanh GELU and dynamic activation quantization as the self-int8
    WhisperForCausalLM that transformers' assisted loop uses (build_self_int8), with
    fewer and cheaper tensor ops: the query, key and value projections are one int8 matmul
    (per-channel quantization is per output row, so fusing them changes nothing), the packed
    fbgemm weights are called directly, and no transformers cache objects or masks are built.
    Two differences in what it computes: it reuses the main model's cross-attention keys/values
    (computed once per window by the main's first pass) instead of projecting the encoder
    outputs again through int8 weights, and it keeps its own copy of them in `cross_dtype()`
    (bf16 where the CPU has bf16 instructions, else fp32).
    """

    def __init__(self, draft: Loaded, suppress: torch.Tensor, eos: frozenset[int]):
        self.w = lean_weights(draft.model)
        self.suppress = suppress  # [V] bool: tokens the draft never proposes
        self.eos = eos
        self.max_len = draft.model.config.max_target_positions
        # [L, 1, H, T_max, Dh]; only positions below n are ever read, and each is written first
        self.k, self.v = lean_cache(self.w, 1, self.max_len, torch.empty)
        self.cross: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.n = 0  # tokens whose K/V are in the cache

    def begin(self, encoder_hidden: torch.Tensor, cache: Any, features: torch.Tensor) -> None:
        self.cross = main_cross_keys_values(cache)  # once per window
        self.n = 0

    def _forward(self, ids: list[int]) -> torch.Tensor:
        """Feed ids at positions n.. n+len(ids); return last-position logits [V]."""
        logits = lean_forward(self.w, self.k, self.v, self.cross, [ids], [self.n])
        self.n += len(ids)
        return logits[0]

    def accept(self, n_valid: int) -> None:
        self.n = min(self.n, n_valid)


class HFDrafter(LogitsDrafter):
    """Any transformers Whisper model as a draft: seq2seq with its own encoder, or decoder-only
    (distil) reading the main's encoder outputs. Uses a transformers cache cropped on rejection."""

    def __init__(self, draft: Loaded, suppress: torch.Tensor, eos: frozenset[int]):
        self.model = draft.model
        self.eos = eos
        self.decoder_only = draft.checkpoint.decoder_only
        self.suppress = suppress.to(draft.device)
        self.device, self.dtype = draft.device, draft.dtype  # (a bf16 encoder makes
        # transformers' model.dtype read bf16; the encoder's hook casts its input itself)
        self.max_len = draft.model.config.max_target_positions
        self.n = 0
        self.cache: Any = None
        self.encoder_hidden: torch.Tensor | None = None

    def begin(self, encoder_hidden: torch.Tensor, cache: Any, features: torch.Tensor) -> None:
        from transformers import DynamicCache, EncoderDecoderCache

        if self.decoder_only:
            self.encoder_hidden = encoder_hidden.to(self.dtype)
            self.cache = DynamicCache()
        else:
            with torch.inference_mode():
                encoder = self.model.get_encoder()
                self.encoder_hidden = encoder(features.to(self.dtype)).last_hidden_state
            self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        self.n = 0

    @torch.inference_mode()
    def _forward(self, ids: list[int]) -> torch.Tensor:
        ids_t = torch.tensor([ids], device=self.device)
        if self.decoder_only:
            out = self.model(
                input_ids=ids_t,
                encoder_outputs=self.encoder_hidden,
                past_key_values=self.cache,
                use_cache=True,
            )
        else:
            out = self.model(
                decoder_input_ids=ids_t,
                encoder_outputs=(self.encoder_hidden,),
                past_key_values=self.cache,
                use_cache=True,
            )
        self.n += len(ids)
        return out.logits[0, -1].float()

    def accept(self, n_valid: int) -> None:
        if self.n > n_valid:
            crop_cache(self.cache, n_valid)
            self.n = n_valid


def cross_precision(assistant: Loaded, engine: str) -> str | None:
    """What results say of the lean self-int8 draft's cross-attention copy: "float32" or
    "bfloat16"; None where no lean draft runs (another assistant, or transformers' engine)."""
    if assistant.checkpoint.id != SELF_INT8 or engine != "specwhisper":
        return None
    return dtype_name(cross_dtype())


def crop_cache(cache: Any, keep: int) -> None:
    """Drop cached positions from `keep` on (transformers 5 crops by a negative count)."""
    extra = cache.get_seq_length() - keep
    if extra > 0:
        cache.crop(-extra)


def draft_vocabulary(main: Loaded) -> tuple[torch.Tensor, frozenset[int]]:
    """What a draft may propose for this main: the [V] bool mask of tokens the main's generate
    never emits, and the end-of-text ids (a draft stops after one)."""
    config = main.model.generation_config
    vocab = main.model.config.vocab_size
    suppress = torch.zeros(vocab, dtype=torch.bool)
    suppress[[i for i in (config.suppress_tokens or []) if i < vocab]] = True
    eos = config.eos_token_id
    eos = frozenset(eos if isinstance(eos, list) else [] if eos is None else [eos])
    return suppress, eos


def make_drafter(main: Loaded, assistant: Loaded) -> Drafter:
    """The drafter for this assistant, proposing only tokens the main's generate may emit."""
    suppress, eos = draft_vocabulary(main)
    if assistant.checkpoint.id == SELF_INT8:
        return Int8SelfDrafter(assistant, suppress, eos)
    return HFDrafter(assistant, suppress, eos)
