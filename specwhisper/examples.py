"""Read a manifest.tsv of speech clips: which file, which language, what was said.

The app uses it for its examples and the benchmark for any folder of clips. A manifest is
tab-separated with a header row; columns `file`, `language` and `reference` are required,
`duration_s`, `source` and `license` are read when present and any others are ignored.
File names resolve relative to the manifest. This module checks that every file exists; it
does not decode them (that is specwhisper.audio's job).
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

MANIFEST_NAME = "manifest.tsv"
REQUIRED_COLUMNS = ("file", "language", "reference")


@dataclass(frozen=True)
class Example:
    path: Path  # the audio file, resolved relative to the manifest
    language: str  # as written: an ISO code such as "en", "auto", or "" for unknown
    reference_text: str  # what is said, for scoring the transcript
    duration_s: float | None  # as the manifest states it; None when it does not
    source: str  # where the clip came from ("" when not stated)
    license: str  # the clip's licence ("" when not stated)
    category: str = ""  # e.g. "read/audiobook"; "" when the manifest has no such column


def read_manifest(path: str | os.PathLike) -> list[Example]:
    """Parse a manifest (or the manifest.tsv inside a folder); ValueError says what is wrong."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    if not path.is_file():
        raise ValueError(f"Manifest {path} not found.")
    # QUOTE_NONE: reference texts may hold quotes, and TSV has no quoting to undo.
    with path.open(encoding="utf-8-sig", newline="") as file:
        rows = csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows, None)
        if not header:
            raise ValueError(f"Manifest {path} is empty; it needs a header row.")
        header = [name.strip() for name in header]
        missing = [name for name in REQUIRED_COLUMNS if name not in header]
        if missing:
            raise ValueError(
                f"Manifest {path} lacks column(s) {', '.join(missing)} "
                f"(it has: {', '.join(header)})."
            )
        examples = []
        for row in rows:
            if not any(cell.strip() for cell in row):
                continue  # a blank line
            if len(row) != len(header):
                raise ValueError(
                    f"{path}, line {rows.line_num}: {len(row)} fields where the header "
                    f"has {len(header)}."
                )
            examples.append(_example(dict(zip(header, row, strict=True)), path, rows.line_num))
    if not examples:
        raise ValueError(f"Manifest {path} lists no clips.")
    return examples


def _example(row: dict[str, str], manifest: Path, line: int) -> Example:
    name = row["file"].strip()
    if not name:
        raise ValueError(f"{manifest}, line {line}: the file column is empty.")
    clip = manifest.parent / name
    if not clip.is_file():
        raise ValueError(f"{manifest}, line {line}: {name} not found in {manifest.parent}.")
    duration = row.get("duration_s", "").strip()
    try:
        duration_s = float(duration) if duration else None
    except ValueError:
        raise ValueError(
            f"{manifest}, line {line}: duration_s {duration!r} is not a number."
        ) from None
    return Example(
        path=clip,
        language=row["language"].strip(),
        reference_text=row["reference"].strip(),
        duration_s=duration_s,
        source=row.get("source", "").strip(),
        license=row.get("license", "").strip(),
        category=(row.get("category") or "").strip(),
    )
