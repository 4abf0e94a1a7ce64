"""Audio in: decode, check and resample a file or array to float32 mono 16 kHz.

Lossless files (PCM or float WAV, FLAC, AIFF, ...: whatever libsndfile reads without a lossy
codec) are read with soundfile, which knows their exact length from the header and converts
every sample width (8 to 32-bit integer, float, double) to float itself. Everything else (MP3,
Vorbis or Opus in OGG/WEBM, AAC in M4A) is decoded by PyAV (FFmpeg). Every
problem with the user's input is raised as `AudioError` with one sentence a person can act
on; oddities that still leave something to transcribe (resampling, downmixing, clipping, a file
cut short, audio that may hold no speech) come back as `Audio.notes`.

Sizes are in MiB (2**20 bytes) everywhere, the unit gradio's page uses for its upload limit.

This module knows nothing about Whisper, torch or gradio: it hands back samples and stops.
It bounds its work by the file size (checked before decoding) and by the duration limit
(decoding stops as soon as it is passed), so a huge or endless input cannot exhaust memory.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import soundfile as sf

SAMPLE_RATE = 16_000
MIN_SOURCE_RATE = 1_000
MAX_SOURCE_RATE = 384_000
MAX_CHANNELS = 64  # bounds the memory of a one-second block; 7.1 surround has 8
SILENCE_PEAK_DBFS = -60.0
# Speech comes and goes with its syllables, so its level in the telephone band swings by 20 dB
# or more within a clip (37 dB at the least over the 96 shared speech clips, and still 8 dB with
# white noise added as loud as the speech); white, pink or brown noise, a hum, a tone or a
# constant offset hold their levels within about 5 dB. Whisper invents text for those: a note.
SPEECH_BAND_HZ = (300.0, 3400.0)
NO_SPEECH_RANGE_DB = 6.0  # the level's range (1st to 99th percentile of 25 ms frames) below this
# Speech puts at least 19% of its energy in that band (the shared clips); a low hum or rumble
# almost none.
NO_SPEECH_BAND_SHARE = 0.05
NO_SPEECH_NOTE = "There may be no speech in this audio"  # each such note starts so
# |x| at or above this counts as "at full scale"; an int16 sample of 32735 or more.
CLIP_LEVEL = 0.999
# Fraction of samples at full scale from which the clipping is worth a note on the page.
CLIP_NOTE_FRACTION = 0.01

ENV_MAX_AUDIO_S = "SPECWHISPER_MAX_AUDIO_S"
ENV_MAX_FILE_MIB = "SPECWHISPER_MAX_FILE_MIB"
DEFAULT_MAX_AUDIO_S_GPU = 600.0
DEFAULT_MAX_AUDIO_S_CPU = 120.0
DEFAULT_MAX_FILE_MIB = 50.0
BYTES_PER_MIB = 2**20  # gradio's page says "Mb" for this (JEDEC), so its number is the one we check

SUPPORTED_FORMATS = "WAV, FLAC, MP3, OGG, M4A and WEBM"
# libsndfile subtypes that store the samples themselves; lossy codecs are left to FFmpeg.
LOSSLESS_SUBTYPES = ("PCM_", "FLOAT", "DOUBLE", "FLAC", "ALAC_")  # name prefixes


class AudioError(ValueError):
    """A problem with the user's audio, worded for a person (shown in the page as is)."""


@dataclass(frozen=True)
class AudioLimits:
    max_duration_s: float = DEFAULT_MAX_AUDIO_S_CPU  # longer audio is rejected
    max_file_bytes: int = int(DEFAULT_MAX_FILE_MIB * BYTES_PER_MIB)  # checked before decoding
    min_duration_s: float = 0.2  # Whisper has nothing to work with below this

    def __post_init__(self) -> None:
        if not 0 < self.min_duration_s < self.max_duration_s:
            raise ValueError(
                f"Audio limits need 0 < min_duration_s < max_duration_s, "
                f"got {self.min_duration_s} and {self.max_duration_s}."
            )
        if self.max_file_bytes <= 0:
            raise ValueError(f"max_file_bytes must be positive, got {self.max_file_bytes}.")

    @classmethod
    def from_env(cls, on_gpu: bool) -> AudioLimits:
        """Limits from SPECWHISPER_MAX_AUDIO_S and SPECWHISPER_MAX_FILE_MIB, else the defaults.

        The default duration is longer on a GPU, where transcribing it takes seconds, not minutes.
        """
        default_s = DEFAULT_MAX_AUDIO_S_GPU if on_gpu else DEFAULT_MAX_AUDIO_S_CPU
        max_mib = _env_positive(ENV_MAX_FILE_MIB, DEFAULT_MAX_FILE_MIB)
        return cls(
            max_duration_s=_env_positive(ENV_MAX_AUDIO_S, default_s),
            max_file_bytes=int(max_mib * BYTES_PER_MIB),
        )


@dataclass(frozen=True)
class Audio:
    samples: np.ndarray  # [n] float32, mono, 16 kHz, finite
    duration_s: float  # of `samples`
    source_rate: int  # sample rate of the input
    n_channels: int  # channels of the input
    notes: tuple[str, ...] = ()  # non-fatal observations, one sentence each, for the page


def load_audio(path: str | os.PathLike | None, limits: AudioLimits | None = None) -> Audio:
    """Decode an audio file to float32 mono 16 kHz, or raise AudioError saying what is wrong.

    `limits` defaults to `AudioLimits.from_env(on_gpu=False)`, the cautious choice; callers
    that know they run on a GPU pass their own.
    """
    limits = limits or AudioLimits.from_env(on_gpu=False)
    path = _check_file(path, limits)
    lossless = _open_lossless(path)
    if lossless is not None:
        with lossless:
            return _read_lossless(lossless, path, limits)
    try:
        with av.open(str(path), metadata_errors="ignore") as container:
            if not container.streams.audio:
                if container.format.name.endswith("_pipe"):  # FFmpeg's image demuxers
                    raise AudioError("The file is an image, not audio.")
                raise AudioError("The file has no audio track.")
            stream = container.streams.audio[0]
            if stream.codec_context is None:
                raise AudioError("The audio in this file uses a codec that cannot be decoded.")
            rate = stream.codec_context.sample_rate
            n_channels = stream.codec_context.channels
            if not rate or n_channels < 1:  # what FFmpeg makes of random bytes, or a header
                raise AudioError(_unreadable_message(path))  # claiming 65535 channels
            _check_format(rate, n_channels)
            # The header's duration is only a hint for the message; the decoded samples decide.
            hint_s = container.duration / av.time_base if container.duration else None
            blocks = _decode_blocks(container, stream, rate)
            return _to_audio(blocks, rate, n_channels, limits, duration_hint_s=hint_s)
    except AudioError:
        raise
    except av.FFmpegError as error:
        raise AudioError(_unreadable_message(path)) from error


def _open_lossless(path: Path) -> sf.SoundFile | None:
    """The file opened by soundfile if it holds lossless samples; None if PyAV should read it."""
    try:
        file = sf.SoundFile(path)
    except (sf.SoundFileError, RuntimeError):  # not a format libsndfile knows (or damaged)
        return None
    if file.subtype.startswith(LOSSLESS_SUBTYPES):
        return file
    file.close()
    return None


def _read_lossless(file: sf.SoundFile, path: Path, limits: AudioLimits) -> Audio:
    rate, n_channels = file.samplerate, file.channels
    _check_format(rate, n_channels)
    duration_s = file.frames / rate  # exact for these formats: too long is known unread
    if duration_s > limits.max_duration_s:
        raise AudioError(_too_long_message(duration_s, limits))

    def blocks() -> Iterator[np.ndarray]:
        """One-second float32 [channels, n] blocks, as `_decode_blocks` gives them."""
        try:
            while len(block := file.read(rate, dtype="float32", always_2d=True)):  # [n, ch]
                yield np.ascontiguousarray(block.T)
        except (sf.SoundFileError, RuntimeError) as error:
            raise AudioError(_unreadable_message(path)) from error

    notes = _cut_short_notes(file, duration_s)
    return _to_audio(blocks(), rate, n_channels, limits, duration_hint_s=duration_s, notes=notes)


# libsndfile's log of a header whose data chunk runs past the end of the file (WAV: "data",
# AIFF: "SSND"), in bytes: "data : 32000 (should be 8001)". It reads what is there.
CUT_SHORT_LOG = re.compile(r"^\s*(?:data|SSND)\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)
UNKNOWN_DATA_SIZE = 0xFFFFFFFF  # what a recorder writing to a pipe puts there: not a claim


def _cut_short_notes(file: sf.SoundFile, duration_s: float) -> tuple[str, ...]:
    """A note when the file holds less audio than its header says, with how much was read."""
    found = CUT_SHORT_LOG.search(file.extra_info)
    if found is None:
        return ()
    claimed, present = (int(n) for n in found.groups())
    if claimed == UNKNOWN_DATA_SIZE or not 0 < present < claimed:
        return ()
    claimed_s = duration_s * claimed / present
    return (
        "The file is shorter than its header says (it may have been cut off while being "
        f"written or copied): {_format_duration(duration_s)} of the "
        f"{_format_duration(claimed_s)} it announces were read.",
    )


def _to_audio(
    blocks: Iterator[np.ndarray],
    rate: int,
    n_channels: int,
    limits: AudioLimits,
    duration_hint_s: float | None,
    notes: tuple[str, ...] = (),
) -> Audio:
    """Downmix, resample and check float blocks [channels, n] at `rate` into one Audio;
    `notes` are the reader's own."""
    max_n_source = math.floor(limits.max_duration_s * rate)
    resampler = (
        av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        if rate != SAMPLE_RATE
        else None
    )
    chunks: list[np.ndarray] = []
    n_source = n_clipped = n_values = 0
    source_peak = 0.0
    for block in blocks:  # [channels, n] float32
        n_source += block.shape[1]
        if n_source > max_n_source:  # stop here: the rest of a long file is never decoded
            raise AudioError(_too_long_message(duration_hint_s, limits))
        if not np.isfinite(block).all():
            raise AudioError("The audio contains invalid samples (NaN or infinity).")
        magnitude = np.abs(block)
        n_clipped += int(np.count_nonzero(magnitude >= CLIP_LEVEL))
        n_values += block.size
        source_peak = max(source_peak, float(magnitude.max()))
        mono = block.mean(axis=0, dtype=np.float32)  # [n]
        chunks.extend(_resample(resampler, mono, rate))
    chunks.extend(_resample(resampler, None, rate))
    samples = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)  # [n] at 16 kHz

    notes = list(notes)
    if rate != SAMPLE_RATE:
        notes.append(f"Resampled from {rate} Hz to {SAMPLE_RATE} Hz.")
    if n_channels > 1:
        notes.append(f"Mixed {n_channels} channels down to mono.")
    if source_peak > 1.0:
        # Only float sources get here; Whisper's features assume [-1, 1], so scale, not clip.
        samples /= source_peak
        notes.append(
            f"The audio went past full scale (peak {source_peak:.3g}); it was scaled down."
        )
    elif n_values and n_clipped / n_values >= CLIP_NOTE_FRACTION:
        percent = 100 * n_clipped / n_values
        notes.append(
            f"The audio clips hard ({percent:.0f}% of samples at full scale); "
            "the transcript may suffer."
        )

    duration_s = len(samples) / SAMPLE_RATE
    if len(samples) == 0:
        raise AudioError("The audio is empty: it contains no samples.")
    if duration_s < limits.min_duration_s:
        raise AudioError(
            f"The audio is only {duration_s:.2f} s long; it must be at least "
            f"{limits.min_duration_s:g} s."
        )
    if float(np.abs(samples).max()) < 10 ** (SILENCE_PEAK_DBFS / 20):
        raise AudioError(
            f"The audio is silent (its loudest sample is below {SILENCE_PEAK_DBFS:.0f} dBFS), "
            "so there is nothing to transcribe."
        )
    doubt = _no_speech_doubt(samples)
    if doubt:
        notes.append(f"{NO_SPEECH_NOTE}: {doubt}; Whisper tends to invent text for such input.")
    return Audio(samples, duration_s, rate, n_channels, tuple(notes))


def _no_speech_doubt(samples: np.ndarray) -> str | None:
    """Why `samples` [n] at 16 kHz may hold no speech, in a clause, or None if it may.

    Measured in 25 ms frames after removing any constant offset: the share of the energy in
    the telephone band, and how far the level in that band moves over the clip (the 1st to the
    99th percentile, so a word in a long silence still counts, and a click does not).
    """
    centred = samples - np.float32(np.mean(samples, dtype=np.float64))  # [n] float32
    if np.abs(centred).max() < 10 ** (SILENCE_PEAK_DBFS / 20):
        return "it holds a constant level (a DC offset) with nothing audible on top"
    band_energy, total_energy = _frame_energies(centred)  # [frames] each
    share = band_energy.sum() / max(total_energy.sum(), np.finfo(np.float64).tiny)
    low, high = (f"{hz:g}" for hz in SPEECH_BAND_HZ)
    if share < NO_SPEECH_BAND_SHARE:
        return f"only {share:.0%} of its energy lies between {low} and {high} Hz, where speech is"
    level_db = 10 * np.log10(np.maximum(band_energy, np.finfo(np.float64).tiny))
    level_db = np.maximum(level_db, level_db.max() - 60)  # digital silence is not -300 dB
    range_db = float(np.percentile(level_db, 99) - np.percentile(level_db, 1))
    if range_db < NO_SPEECH_RANGE_DB:
        return (
            f"its level between {low} and {high} Hz stays within {range_db:.0f} dB, as noise, "
            "a hum or a tone does, where speech rises and falls by 20 dB or more"
        )
    return None


def _frame_energies(samples: np.ndarray, frame_s: float = 0.025) -> tuple[np.ndarray, np.ndarray]:
    """Energy per frame in the speech band and in all, for Hann-windowed frames of `frame_s`
    (a partial last frame is dropped; a clip shorter than one frame is one frame)."""
    size = round(frame_s * SAMPLE_RATE)
    if len(samples) < size:
        samples = np.pad(samples, (0, size - len(samples)))
    n_frames = len(samples) // size
    frames = samples[: size * n_frames].reshape(n_frames, size)  # [frames, size], a view
    freqs = np.fft.rfftfreq(size, 1 / SAMPLE_RATE)
    in_band = (freqs >= SPEECH_BAND_HZ[0]) & (freqs <= SPEECH_BAND_HZ[1])
    window = np.hanning(size)
    band, total = [], []
    for start in range(0, n_frames, 4096):  # bounded memory for a 10 min clip
        power = np.abs(np.fft.rfft(frames[start : start + 4096] * window, axis=1)) ** 2
        band.append(power[:, in_band].sum(axis=1))
        total.append(power.sum(axis=1))
    return np.concatenate(band), np.concatenate(total)


def _resample(
    resampler: av.AudioResampler | None, mono: np.ndarray | None, rate: int
) -> list[np.ndarray]:
    """Feed [n] float32 at `rate` (None flushes) and return what comes out at 16 kHz."""
    if resampler is None:
        return [] if mono is None else [mono]
    frame = None
    if mono is not None:
        frame = av.AudioFrame.from_ndarray(mono[None, :], format="flt", layout="mono")
        frame.sample_rate = rate
    return [out.to_ndarray()[0] for out in resampler.resample(frame)]


def _decode_blocks(
    container: av.container.InputContainer, stream: av.AudioStream, rate: int
) -> Iterator[np.ndarray]:
    """Decoded audio as float32 [channels, n] blocks of one second (the last may be shorter)."""
    # Codecs give frames of a few hundred samples; handling each in Python would cost more
    # than decoding, so a FIFO gathers them into one-second blocks in C.
    fifo = av.AudioFifo()
    for frame in container.decode(stream):
        frame.pts = None  # the FIFO would insist on timestamps without gaps
        try:
            fifo.write(frame)
        except ValueError as error:  # the FIFO takes one sample format, layout and rate
            raise AudioError(
                "The audio format changes partway through the file, which is not supported."
            ) from error
        while fifo.samples >= rate:
            yield _frame_to_float(fifo.read(rate))
    if fifo.samples:
        yield _frame_to_float(fifo.read())


def _frame_to_float(frame: av.AudioFrame) -> np.ndarray:
    """A frame in any PCM sample format -> float32 [channels, n]."""
    data = frame.to_ndarray()
    if not frame.format.is_planar:
        data = data.reshape(-1, len(frame.layout.channels)).T  # packed [1, n * ch] -> [ch, n]
    return _int_to_float(data)


def _int_to_float(data: np.ndarray) -> np.ndarray:
    """Integer PCM scaled by its full range to float32 in [-1, 1); floats pass through.

    The result is C-contiguous: reductions over a transposed (packed) block are several
    times slower.
    """
    samples = np.ascontiguousarray(data, dtype=np.float32)
    if data.dtype.kind == "f":
        return samples
    full_scale = float(2 ** (8 * data.dtype.itemsize - 1))
    if data.dtype.kind == "u":  # unsigned PCM (8-bit WAV) is centred on half its range
        samples -= full_scale
    samples /= full_scale
    return samples


def _check_file(path: str | os.PathLike | None, limits: AudioLimits) -> Path:
    """Everything that can be said about a file before FFmpeg opens it."""
    if path is None or str(path) == "":
        raise AudioError("No audio file was given.")
    path = Path(path)
    if not path.exists():
        raise AudioError(f"The audio file {path.name} could not be found.")
    if path.is_dir():
        raise AudioError(f"The path {path.name} is a folder, not an audio file.")
    if not path.is_file():  # a FIFO or device would block or never end
        raise AudioError(f"The path {path.name} is not a regular file.")
    size = path.stat().st_size
    if size == 0:
        raise AudioError("The file is empty (0 bytes).")
    if size > limits.max_file_bytes:
        limit_mib = limits.max_file_bytes / BYTES_PER_MIB
        raise AudioError(
            f"The file is {_more_than(size / BYTES_PER_MIB, limit_mib, 'MiB')}; "
            f"{_this_server()} accepts files up to {limit_mib:.3g} MiB."
        )
    if not os.access(path, os.R_OK):
        raise AudioError("The file could not be opened (permission denied).")
    return path


def _check_format(rate: int | None, n_channels: int) -> None:
    if not 1 <= n_channels <= MAX_CHANNELS:
        raise AudioError(
            f"The audio has {n_channels} channels; between 1 and {MAX_CHANNELS} are supported."
        )
    if not rate:
        raise AudioError("The file does not say its sample rate; it may be damaged.")
    if not MIN_SOURCE_RATE <= rate <= MAX_SOURCE_RATE:
        raise AudioError(
            f"The sample rate of {rate} Hz is not supported; it must be between "
            f"{MIN_SOURCE_RATE} and {MAX_SOURCE_RATE} Hz."
        )


def _unreadable_message(path: Path) -> str:
    with path.open("rb") as file:
        head = file.read(1024)
    # rstrip: a multi-byte character cut off at the end of `head` still leaves text.
    text = head.decode("utf-8", errors="replace").rstrip("\ufffd")
    if "\ufffd" not in text and all(c.isprintable() or c.isspace() for c in text):
        return "The file contains text, not audio."
    return (
        "The file could not be read as audio: it may be damaged, or in a format that is not "
        f"supported ({SUPPORTED_FORMATS} work)."
    )


def _too_long_message(duration_s: float | None, limits: AudioLimits) -> str:
    """Said to a visitor, who cannot change the limit (SPECWHISPER_MAX_AUDIO_S: the owner can)."""
    how_long = "too long"
    if duration_s and duration_s > limits.max_duration_s:
        how_long = _format_duration(duration_s)
        if how_long == _format_duration(limits.max_duration_s):
            how_long = _more_than(duration_s, limits.max_duration_s, "s")
        how_long += " long"
    limit = _format_duration(limits.max_duration_s)
    return f"The audio is {how_long}; {_this_server()} accepts up to {limit}."


def _this_server() -> str:
    """How a refusal names the app: a Space only where Hugging Face runs it (it sets SPACE_ID)."""
    return "this Space" if os.environ.get("SPACE_ID") else "this server"


def _more_than(value: float, limit: float, unit: str) -> str:
    """`value` with as many decimals as it takes to read as more than `limit` (one at least):
    120.01 s against a 120 s limit is not "2 min"."""
    for decimals in range(1, 7):
        text = f"{value:.{decimals}f}"
        if float(text) > limit:
            return f"{text} {unit}"
    return f"{value} {unit}"


def _format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def _env_positive(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise ValueError(f"{name} must be a positive number, got {raw!r}.")
    return value


def chunks(
    samples: np.ndarray, chunk_s: float = 30.0, stride_s: float = 5.0
) -> list[tuple[np.ndarray, tuple[int, int, int]]]:
    """A recording cut the way transformers' ASR pipeline cuts it (`chunk_iter`, with its
    default stride of chunk_s / 6): windows of chunk_s that overlap each neighbour by stride_s,
    each with its (length, left stride, right stride) in samples, which the pipeline's merge
    needs to stitch the pieces' tokens back together. One piece when it fits in one window."""
    size, stride = int(chunk_s * SAMPLE_RATE), int(stride_s * SAMPLE_RATE)
    step = size - 2 * stride
    out = []
    for start in range(0, max(len(samples), 1), step):
        piece = samples[start : start + size]
        last = start + size >= len(samples)
        left, right = (0 if start == 0 else stride), (0 if last else stride)
        if len(piece) > left:
            out.append((piece, (len(piece), left, right)))
        if last:
            break
    return out
