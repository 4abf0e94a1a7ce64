"""The languages a main can be asked for: those its generation config has a token for.

Whisper's `generate` looks a language up in the main's `generation_config.lang_to_id` and fails
on one it lacks (whisper-base has no `<|yue|>`: Cantonese came with large-v3's tokenizer), so
the page lists, and a request may name, only the main's own. Read from the main's
generation_config.json (a local folder, or a Hub main's cached snapshot), else from its
vocabulary family: the English-only vocabulary has no language tokens, the v1/v2 one the first
99 of Whisper's languages, the v3 one all 100.

It loads no model and knows nothing of the page.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from specwhisper import checkpoints, hub


def all_languages() -> dict[str, str]:
    """Every language Whisper's tokenizers know, code -> English name, in token order."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return dict(LANGUAGES)


def main_languages(ckpt: checkpoints.Checkpoint) -> tuple[str, ...]:
    """The language codes `ckpt` can be asked for, in Whisper's token order; ("en",) for an
    English-only main, which takes no language token and transcribes English."""
    if ckpt.english_only:
        return ("en",)
    folder = ckpt.path
    if folder is None:  # a Hub main: its cached snapshot, if any (read each time: it may arrive)
        snapshot = hub.cached_snapshot(ckpt.id)
        folder = snapshot.folder if snapshot is not None else None
    return _languages_in(folder, ckpt.family)


@functools.lru_cache(maxsize=64)
def _languages_in(folder: Path | None, family: str) -> tuple[str, ...]:
    known = all_languages()
    tokens = _lang_to_id(folder) if folder is not None else None
    if tokens is not None:
        return tuple(code for code in known if f"<|{code}|>" in tokens)
    codes = tuple(known)
    return codes[:99] if family == checkpoints.FAMILY_V2 else codes


def _lang_to_id(folder: Path) -> dict[str, int] | None:
    """The generation config's language tokens, None where it has none to read."""
    try:
        config = json.loads((folder / "generation_config.json").read_text())
    except (OSError, ValueError):
        return None
    tokens = config.get("lang_to_id") if isinstance(config, dict) else None
    return tokens if isinstance(tokens, dict) and tokens else None


def language_problem(ckpt: checkpoints.Checkpoint, code: str | None) -> str | None:
    """Why `ckpt` cannot be asked for the language `code`, or None (also on auto-detect)."""
    if code is None or ckpt.english_only or code in main_languages(ckpt):
        return None
    name = all_languages().get(code, code).title()
    return (
        f"{ckpt.label} has no {name} ('{code}'): that language is not in its tokenizer. Pick "
        "another language, auto-detect, or a main that knows it"
        + (" (the large-v3 models)." if code in _v3_only() else ".")
    )


def _v3_only() -> tuple[str, ...]:
    """The languages only the v3 vocabulary has."""
    return tuple(all_languages())[99:]
