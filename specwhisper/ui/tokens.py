"""The speculative transcript token by token: each token's text, who produced it (an accepted
draft token, or the main model's correction, bonus or own first token), and one table row per
speculative step. Reads the `steps` of the compare JSON; decodes nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

# Token origins in the draft-token view: (colour, legend label).
ORIGINS = {
    "draft": ("#22c55e", "accepted draft token"),
    "correction": ("#ef4444", "main model: correction after a rejection"),
    "bonus": ("#3b82f6", "main model: bonus after a fully accepted draft"),
    "main": ("#94a3b8", "main model: first token, or a step without a draft"),
}
# Why the main model added a step's last token, for the step table.
STEP_KINDS = {
    "main": "no draft (a window's first token, or drafting paused)",
    "correction": "correction of the first rejected draft token",
    "bonus": "bonus: the whole draft was accepted",
}
STEP_COLUMNS = ["Step", "Accepted", "Accepted draft", "Rejected draft", "Main token", "Why"]
# Each column wide enough for its header's longest word and a few tokens, in px: the table
# scrolls sideways on a phone rather than squeezing a header into a letter per line.
STEP_COLUMN_WIDTHS = ["64px", "96px", "220px", "160px", "120px", "300px"]
_SPECIAL_TOKEN = re.compile(r"<\|[^|]*\|>")


def token_pieces(tokenizer: Any, ids: Iterable[int]) -> dict[int, str]:
    """Each token id's text; special and timestamp tokens by their name, "<|endoftext|>"."""
    special = set(tokenizer.all_special_ids)
    pieces: dict[int, str] = {}
    for i in set(ids):
        text = tokenizer.decode([i])
        if i in special or not text or is_special(text):
            text = tokenizer.convert_ids_to_tokens(i)
            text = text if is_special(text) else f"<|{text}|>"
        pieces[i] = text
    return pieces


def result_token_ids(result: Mapping[str, Any]) -> set[int]:
    """Every token id the views name: both outputs, every draft and every main token."""
    spec = result["speculative"]
    ids = set(result["baseline"]["token_ids"]) | set(spec["token_ids"])
    for step in spec["steps"]:
        ids.update(step["drafted"])
        if step["main_token"] is not None:  # None: the step ended inside its draft
            ids.add(step["main_token"])
    return ids


def is_special(piece: str) -> bool:
    """Whether a token's text is a special or timestamp token, "<|...|>"."""
    return bool(_SPECIAL_TOKEN.fullmatch(piece))


def text_of(ids: Iterable[int], pieces: Mapping[int, str]) -> str:
    """The transcript text of some tokens, special tokens left out."""
    return "".join(p for p in (pieces.get(i, f"⟨{i}⟩") for i in ids) if not is_special(p))


def token_origins(token_ids: list[int], steps: list[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """(token id, origin) for each token of the speculative output, origin being one of
    ORIGINS. The steps are laid over the tokens in order: each adds its accepted draft tokens,
    then the main model's own token unless the step ended inside its draft (`main_token` None,
    on end-of-text or the length limit). Tokens no step explains come from the main model."""
    blocks = [block for block in map(_step_origins, steps) if block]
    out: list[tuple[int, str]] = []
    i = b = 0
    while i < len(token_ids):
        block = blocks[b] if b < len(blocks) else []
        n = 0
        while n < len(block) and i + n < len(token_ids) and token_ids[i + n] == block[n][0]:
            n += 1
        if n:  # the output leaves out end-of-text, so a matching prefix of a step is enough
            out.extend(block[:n])
            i, b = i + n, b + 1
        elif b + 1 < len(blocks) and blocks[b + 1][0][0] == token_ids[i]:
            b += 1  # a step whose tokens the output left out (a window's end-of-text, long-form)
        else:
            out.append((token_ids[i], "main"))
            i += 1
    return out


def _step_origins(step: Mapping[str, Any]) -> list[tuple[int, str]]:
    """The tokens a step added, each with its origin."""
    tokens = [(t, "draft") for t in step["drafted"][: step["n_accepted"]]]
    if step["main_token"] is not None:
        tokens.append((step["main_token"], _main_token_kind(step)))
    return tokens


def _main_token_kind(step: Mapping[str, Any]) -> str:
    """Why the main model supplied a step's last token: an ORIGINS key."""
    if not step["drafted"]:
        return "main"
    return "bonus" if step["n_accepted"] == len(step["drafted"]) else "correction"


def draft_tokens(
    result: Mapping[str, Any], pieces: Mapping[int, str]
) -> list[tuple[str, str | None]]:
    """The speculative transcript token by token, each labelled with its origin (the legend of
    gr.HighlightedText). Prompt, end-of-text and timestamp tokens are left out."""
    spec = result["speculative"]
    if not spec["steps"]:
        return [("No speculative steps were recorded (the assistant never drafted).", None)]
    return [
        (piece, ORIGINS[origin][1])
        for token, origin in token_origins(spec["token_ids"], spec["steps"])
        if not is_special(piece := pieces.get(token, f"⟨{token}⟩"))
    ]


def steps_frame(result: Mapping[str, Any], pieces: Mapping[int, str]) -> pd.DataFrame:
    """One row per speculative step: what was drafted, what the main model kept, its own token
    and why it added it. Tokens are quoted, so their spaces show."""

    def quoted(ids: Iterable[int]) -> str:
        return " ".join(json.dumps(pieces.get(t, f"⟨{t}⟩"), ensure_ascii=False) for t in ids)

    rows = []
    for n, step in enumerate(result["speculative"]["steps"], start=1):
        drafted, n_accepted, token = step["drafted"], step["n_accepted"], step["main_token"]
        if token is None:
            why = "none: the step ended inside its draft (end of text, or the length limit)"
        else:
            why = STEP_KINDS[_main_token_kind(step)]
        rows.append(
            [
                n,
                f"{n_accepted}/{len(drafted)}",
                quoted(drafted[:n_accepted]),
                quoted(drafted[n_accepted:]),
                "" if token is None else quoted([token]),
                why,
            ]
        )
    return pd.DataFrame(rows, columns=STEP_COLUMNS)
