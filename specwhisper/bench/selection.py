"""The bench's input: which clips of a manifest, in which language, decoded and checked
before anything loads; consecutive short clips joined into 20-30 s ones (`--join`)."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specwhisper import (
    examples,
    request_check,
)
from specwhisper.audio import SAMPLE_RATE, AudioLimits, load_audio
from specwhisper.decoding import WINDOW_S
from specwhisper.examples import Example

# Benchmark clips are the user's own local files, not uploads: only sanity limits apply.
BENCH_LIMITS = AudioLimits(max_duration_s=3600.0, max_file_bytes=2_000_000_000)


class BenchError(ValueError):
    """Bad input, worded for a person: the CLI prints it on one line and exits with code 2."""


@dataclass(frozen=True)
class Clip:
    """One manifest row picked for the run, with its audio decoded."""

    name: str  # file as written in the manifest (relative to it, or absolute)
    category: str  # the manifest's category column, "" when absent
    language: str | None  # Whisper code given to the main; None: auto-detect
    reference_text: str  # the manifest's true text of the clip
    samples: np.ndarray = dataclasses.field(repr=False)  # [n] float32 mono 16 kHz


def select_clips(
    manifest: str | os.PathLike,
    *,
    language: str = "auto",
    pattern: str | None = None,
    category: str | None = None,
    limit: int | None = None,
) -> list[Clip]:
    """Read the manifest, keep the rows asked for, and decode their audio; BenchError if bad."""
    try:
        rows = examples.read_manifest(manifest)
    except ValueError as e:
        raise BenchError(str(e)) from None
    path = Path(manifest)
    path = path / examples.MANIFEST_NAME if path.is_dir() else path
    names = {ex.path: _name(ex.path, path.parent) for ex in rows}
    if category is not None and not any(ex.category for ex in rows):
        raise BenchError(f"--category needs a category column; {path} has none.")
    if pattern is not None:
        try:
            regex = re.compile(pattern)
        except re.error as e:
            raise BenchError(f"--filter {pattern!r} is not a regular expression: {e}.") from None
        rows = [ex for ex in rows if regex.search(names[ex.path])]
    if category is not None:
        wanted = category.strip().lower()
        rows = [ex for ex in rows if ex.category.lower().startswith(wanted)]
    rows = rows[:limit] if limit is not None else rows
    if not rows:
        raise BenchError(f"No clip in {path} matches --filter/--category.")
    return [_clip(ex, names[ex.path], ex.category, language) for ex in rows]


def _name(clip: Path, folder: Path) -> str:
    """The file as the manifest wrote it: relative to the manifest's folder, or absolute."""
    # Relative rows are folder / row, so relative_to gives the row back (even with a "../");
    # an absolute row replaced the folder and is not under it.
    return clip.relative_to(folder).as_posix() if clip.is_relative_to(folder) else clip.as_posix()


def _clip(ex: Example, name: str, category: str, language: str) -> Clip:
    try:
        # --language auto: each row's own language when it names one, else auto-detect.
        code = request_check.language_code(
            ex.language if language.strip().lower() == "auto" else language
        )
        audio = load_audio(ex.path, BENCH_LIMITS)
    except ValueError as e:  # CompareError, AudioError
        raise BenchError(f"{name}: {e}") from None
    return Clip(name, category, code, ex.reference_text, audio.samples)


def join_clips(
    clips: list[Clip], min_s: float, gap_s: float = 0.3, max_s: float = WINDOW_S
) -> list[Clip]:
    """Join consecutive clips of one language into clips of at least `min_s` and at most
    `max_s` seconds (one 30 s window), with `gap_s` of silence between them and their
    reference texts joined: real speech at the 20-30 s lengths where a window is mostly used, from a
    manifest of short lines. A clip that would push a group past `max_s` starts the next group
    (a clip longer than `max_s` stays alone); a remainder shorter than min_s / 2 is added to
    the language's previous joined clip when that still fits in `max_s`."""
    gap = np.zeros(int(gap_s * SAMPLE_RATE), dtype=np.float32)

    def seconds(group: list[Clip]) -> float:
        return (sum(len(c.samples) for c in group) + (len(group) - 1) * len(gap)) / SAMPLE_RATE

    groups: list[list[Clip]] = []
    for clip in clips:
        last = groups[-1] if groups else None
        if (
            last is None
            or seconds(last) >= min_s
            or seconds([*last, clip]) > max_s
            or last[0].language != clip.language
        ):
            groups.append([clip])
        else:
            last.append(clip)
    merged: list[list[Clip]] = []
    for group in groups:
        short = seconds(group) < min_s / 2
        if (
            short
            and merged
            and merged[-1][0].language == group[0].language
            and seconds(merged[-1] + group) <= max_s
        ):
            merged[-1] += group  # a language's short remainder
        else:
            merged.append(group)
    groups = merged
    joined = []
    for group in groups:
        parts = [p for c in group for p in (c.samples, gap)][:-1]
        name = f"{group[0].name}+{len(group) - 1}" if len(group) > 1 else group[0].name
        text = " ".join(c.reference_text for c in group)
        joined.append(Clip(name, group[0].category, group[0].language, text, np.concatenate(parts)))
    return joined


def check_clips(checked: request_check.CheckedRequest, clips: list[Clip]) -> None:
    """Every clip's language must suit the main; raise BenchError before anything loads (each
    clip's language is already a Whisper code, read by request_check.language_code)."""
    main = checked.main
    others = sorted({c.language for c in clips if c.language not in (None, "en")})
    if main.english_only and others:
        n = sum(c.language in others for c in clips)
        raise BenchError(
            f"{main.label} is English-only, but {n} selected clip(s) are in {', '.join(others)}. "
            "Select English clips (--filter, --category) or pick a multilingual main."
        )
