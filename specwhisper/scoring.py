"""Scoring transcripts: Whisper's text normalizer for a language, and word error rate against
the reference text (what is really said). The bench, the page's reference column and the tests
score here; it decodes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specwhisper.loading import Loaded


def normalizer(language: str | None, main: Loaded) -> Callable[[str], str]:
    """Whisper's text normalizer for scoring (text_normalizer), with the main's
    British->American spellings for English."""
    if language != "en":
        return text_normalizer(language)
    # Converted tokenizers may lack normalizer.json; the spelling mapping is then empty.
    spelling = getattr(main.processor.tokenizer, "english_spelling_normalizer", None) or {}
    return text_normalizer(language, spelling)


def wer(pairs: list[tuple[str, str]]) -> float | None:
    """Corpus WER of normalized (reference, hypothesis) pairs: errors summed over the pairs
    over reference words summed. Pairs with an empty reference are skipped; None if none is left.
    """
    import jiwer

    pairs = [(ref, hyp) for ref, hyp in pairs if ref]
    if not pairs:
        return None
    return float(jiwer.wer([ref for ref, _ in pairs], [hyp for _, hyp in pairs]))


def text_normalizer(
    language: str | None, spelling: dict[str, str] | None = None
) -> Callable[[str], str]:
    """Whisper's normalizer as the bench and the page score WER: the English one (with the
    tokenizer's British->American spellings, when given) for en, the basic one otherwise,
    without diacritics for es (the Spanish reference texts lack most accents)."""
    from transformers.models.whisper.english_normalizer import (
        BasicTextNormalizer,
        EnglishTextNormalizer,
    )

    if language == "en":
        english = EnglishTextNormalizer(spelling or {})
        return lambda text: english(text).strip()
    basic = BasicTextNormalizer(remove_diacritics=language == "es")
    return lambda text: basic(text).strip()


def word_error_rate(reference: str, hypothesis: str, language: str | None) -> float | None:
    """WER of one transcript against a reference text, both normalized; None without one."""
    import jiwer

    normalize = text_normalizer(language)
    truth = normalize(reference)
    return float(jiwer.wer(truth, normalize(hypothesis))) if truth else None
