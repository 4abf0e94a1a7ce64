"""faster-whisper as a reference column: the setting, the "no CTranslate2 copy" sentence, the
column on the real offline weights (its text and timing fields), the page rendering it, and the
bench's --reference flag and JSON keys."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from specwhisper import checkpoints, compare, reference, request_check
from specwhisper.audio import AudioLimits, load_audio
from specwhisper.bench import cli
from specwhisper.reference import NO_CT2, ReferenceError, parse_reference, reference_problem
from specwhisper.request_check import CompareRequest
from specwhisper.ui.form import request_settings
from specwhisper.ui.handlers import on_compare, run_compare
from specwhisper.ui.reference_view import render_reference

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]
JFK = ROOT / "examples" / "en_whispercpp_jfk.wav"
JFK_TEXT = (
    "And so my fellow Americans, ask not what your country can do for you, ask what you can do "
    "for your country."
)
TIMING_KEYS = {"time_s", "times_s", "n_tokens", "tokens_per_s", "speedup", "load_time_s"}
AGREEMENT_KEYS = {"identical", "same_text", "same_normalized_text", "diff"}
BENCH_KEYS = {
    "reference",
    "reference_s",
    "reference_speedup",
    "reference_median_clip_speedup",
    "reference_min_clip_speedup",
    "speculative_speedup_over_reference",
    "median_clip_speculative_speedup_over_reference",
    "min_clip_speculative_speedup_over_reference",
    "reference_n_threads",
    "reference_n_identical_clips",
    "reference_n_same_text_clips",
    "reference_n_same_normalized_clips",
    "wer_reference",
}


# --- the setting ----------------------------------------------------------------------------


def test_reference_setting_is_parsed_and_checked():
    assert parse_reference("") is None and parse_reference("off") is None
    assert parse_reference("faster-whisper").name == "faster-whisper:int8"
    assert parse_reference(" Faster-Whisper:float32 ").name == "faster-whisper:float32"
    with pytest.raises(ReferenceError, match="Unknown reference engine"):
        parse_reference("whisper.cpp")
    with pytest.raises(ReferenceError, match="Unknown compute type 'int4'"):
        parse_reference("faster-whisper:int4")
    assert "GPU only" in reference_problem("faster-whisper:float16", on_gpu=False)
    assert reference.compute_types(on_gpu=False) == ["int8", "float32"]
    # on a GPU no compute type is offered, and the API says why
    assert reference.compute_types(on_gpu=True) == []
    for value in ("faster-whisper:float16", "faster-whisper:int8"):
        assert reference_problem(value, on_gpu=True) == reference.NOT_ON_GPU
    assert reference_problem("", on_gpu=True) is None
    # the form's checkbox and compute type become the endpoint's one value
    assert request_settings({"reference_on": True, "reference_compute_type": "float32"}) == {
        "reference": "faster-whisper:float32"
    }
    assert request_settings({"reference_on": False, "reference_compute_type": "int8"}) == {
        "reference": ""
    }
    assert request_settings({"gamma": 5}) == {"gamma": 5}  # the API's settings pass unchanged


def test_the_ctranslate2_build_needs_cuda_12s_cublas():
    """Why a GPU offers no reference column: the installed CTranslate2 library opens cuBLAS by
    its CUDA 12 name, while PyPI's torch 2.13 is a CUDA 13 build. A CTranslate2 that names
    another cuBLAS fails this test, and the GPU choice is to be measured again."""
    import importlib.util

    package = Path(importlib.util.find_spec("ctranslate2").origin).parent
    libraries = list((package.parent / "ctranslate2.libs").glob("libctranslate2*.so*"))
    assert libraries, "the ctranslate2 wheel's library folder moved"
    names = set(re.findall(rb"libcublas\.so\.\d+", libraries[0].read_bytes()))
    assert names == {b"libcublas.so.12"}
    assert "libcublas.so.12" in reference.NOT_ON_GPU


def test_unknown_reference_is_a_sentence_before_anything_loads(tiny_models, use_models):
    use_models(tiny_models)
    req = CompareRequest("tiny-random-a", "self-int8", reference="faster-whisper:int4")
    with pytest.raises(request_check.CompareError, match="Unknown compute type"):
        request_check.check_request(req)


# --- no CTranslate2 copy --------------------------------------------------------------------


def test_no_ct2_copy_is_said_in_a_sentence(tiny_models, use_models, tmp_path, monkeypatch):
    use_models(tiny_models)
    local = checkpoints.resolve("tiny-random-a")  # a transformers folder, nothing CTranslate2
    with pytest.raises(ReferenceError) as caught:
        reference.ct2_source(local)
    assert str(caught.value) == NO_CT2.format(main="tiny-random-a")
    assert str(caught.value) == (
        "No CTranslate2 copy of tiny-random-a is available here, so faster-whisper cannot run it."
    )
    # a Hub main with the Hub off and an empty cache: faster-whisper's repository is not there
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ReferenceError, match="No CTranslate2 copy of openai/whisper-base"):
        reference.ct2_source(checkpoints.HUB_MAINS["openai/whisper-base"])
    # a main faster-whisper publishes no CTranslate2 copy of at all
    with pytest.raises(ReferenceError, match="No CTranslate2 copy"):
        custom = checkpoints.Checkpoint("org/whisper-custom", checkpoints.FAMILY_V2, False, 8, 80)
        reference.ct2_source(custom)


def test_page_says_when_the_main_has_no_ct2_copy(app_models, use_models):
    """The comparison still runs; the third column is the sentence, and the API's key says it."""
    use_models(app_models)
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
        engine="specwhisper",
        reference_on=True,
        reference_compute_type="int8",
    )
    box, column = outputs[-2:]
    assert box.visible is True
    assert "Reference: faster-whisper (int8)" in column
    assert NO_CT2.format(main="tiny-random-a") in column
    assert "IDENTICAL" in outputs.verdict  # the two columns are unaffected
    # the API: the same sentence under `reference`
    result = run_compare(
        str(JFK),
        "auto",
        "transcribe",
        "tiny-random-a",
        "self-int8",
        repeats=1,
        reference="faster-whisper:float32",
    )
    assert result["reference"] == {
        "available": False,
        "engine": "faster-whisper",
        "compute_type": "float32",
        "note": NO_CT2.format(main="tiny-random-a"),
    }


# --- the real offline weights ---------------------------------------------------------------


@pytest.fixture(scope="module")
def jfk_samples():
    return load_audio(JFK, AudioLimits()).samples


@pytest.fixture(scope="module")
def base_result(real_models, jfk_samples):
    """whisper-base (its CTranslate2 model.bin is two package pieces, joined in memory) with
    faster-whisper int8 beside it, one timed repeat."""
    if not (real_models / "whisper-base" / "model.safetensors").is_file():
        pytest.skip("whisper-base not prepared")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECWHISPER_MODELS", str(real_models))
        req = CompareRequest(
            "whisper-base", "self-int8", language="en", repeats=1, reference="faster-whisper:int8"
        )
        return compare.compare(jfk_samples, req).to_dict()


@pytest.mark.slow
def test_reference_column_on_whisper_base(base_result):
    ref = base_result["reference"]
    assert ref["available"] is True and ref["engine"] == "faster-whisper"
    assert TIMING_KEYS | AGREEMENT_KEYS <= ref.keys()
    assert ref["weights"] == "whisper-base (local)"
    assert ref["compute_type"] == "int8" and ref["ct2_compute_type"].startswith("int8")
    assert ref["threads"] == torch.get_num_threads()
    assert ref["language"] == "en"
    # real speech, read well: the normalized text is the baseline's (on this clip the tokens are
    # too, but another engine may differ, so the test asks for the words only)
    assert ref["same_normalized_text"] is True
    assert "ask not what your country can do for you" in ref["text"]
    assert ref["n_tokens"] == len(ref["token_ids"]) > 10
    assert len(ref["times_s"]) == 1 and ref["time_s"] == ref["times_s"][0] > 0
    assert ref["tokens_per_s"] == pytest.approx(ref["n_tokens"] / ref["time_s"], rel=0.01)
    base_s = base_result["baseline"]["time_s"]
    assert ref["speedup"] == pytest.approx(base_s / ref["time_s"], rel=0.01)
    assert ref["identical"] == (ref["token_ids"] == base_result["baseline"]["token_ids"])
    assert ref["diff"] == [] if ref["same_text"] else ref["diff"]
    assert "different engine" in ref["note"]


@pytest.mark.slow
def test_reference_column_on_whisper_tiny_en(real_models, jfk_samples, use_models):
    """tiny.en's CTranslate2 folder is the installed package's own, loaded as it is."""
    use_models(real_models)
    source = reference.ct2_source(checkpoints.resolve("whisper-tiny.en"))
    assert source.folder is not None and (source.folder / "model.bin").is_file()
    req = CompareRequest(
        "whisper-tiny.en", "self-int8", repeats=1, reference="faster-whisper:float32"
    )
    ref = compare.compare(jfk_samples, req).to_dict()["reference"]
    assert ref["available"] and ref["ct2_compute_type"] == "float32"
    assert ref["same_normalized_text"] is True and ref["time_s"] > 0


@pytest.mark.slow
def test_page_renders_the_reference_column(base_result):
    html = render_reference(base_result, JFK_TEXT)
    assert "Reference: faster-whisper (int8)" in html
    assert "whisper-base (local)" in html and "Tokens/s" in html
    agreement = ("Same token ids", "Same text", "Differs from the baseline")
    assert any(phrase in html for phrase in agreement)
    assert "WER against the example's reference text: baseline " in html
    assert "faster-whisper 0.0%" in html  # the JFK line, transcribed right
    assert "different engine" in html
    assert render_reference({**base_result, "reference": None}) == ""


def test_word_diff_lists_the_changes():
    changes = reference.word_diff("ask not what your country", "ask not what our country now")
    assert [(c.baseline, c.reference) for c in changes] == [("your", "our"), ("", "now")]
    html = render_reference(
        {
            "baseline": {"text": "ask not what your country"},
            "speculative": {"text": "ask not what your country", "time_s": 1.0},
            "language": "en",
            "reference": {
                "available": True,
                "engine": "faster-whisper",
                "compute_type": "int8",
                "ct2_compute_type": "int8_float32",
                "weights": "whisper-base (local)",
                "threads": 2,
                "text": "ask not what our country now",
                "language": "en",
                "time_s": 0.5,
                "times_s": [0.5],
                "n_tokens": 6,
                "tokens_per_s": 12.0,
                "speedup": 3.0,
                "identical": False,
                "same_text": False,
                "same_normalized_text": False,
                "diff": [
                    {"baseline": "your", "reference": "our"},
                    {"baseline": "", "reference": "now"},
                ],
                "timing": "median of 1",
                "note": reference.DIFFERENT_ENGINE,
            },
        },
        "ask not what your country",
    )
    assert "Differs from the baseline</b>: different words" in html
    assert "<del" in html and ">your</del> → <ins" in html and ">now</ins>" in html
    assert "faster-whisper 40.0%" in html and "baseline 0.0%" in html
    assert "<b>3.00×</b>" in html  # against the baseline
    assert "<b>0.50×</b>" in html  # the speculative column (1.0 s) against it (0.5 s)


# --- the bench ------------------------------------------------------------------------------

BENCH_ARGS = ["--main", "whisper-tiny.en", "--assistant", "self-int8", "--manifest"]


def test_bench_reference_flag():
    args = [*BENCH_ARGS, "clips.tsv"]
    assert cli.parse_args(args).reference == ""
    assert cli.parse_args([*args, "--reference"]).reference == "faster-whisper:int8"
    chosen = cli.parse_args([*args, "--reference", "faster-whisper:float32"])
    assert chosen.reference == "faster-whisper:float32"
    assert cli.request(chosen).reference == "faster-whisper:float32"
    for wrong in (["--reference", "faster-whisper:int4"], ["--reference", "--batch-size", "2"]):
        with pytest.raises(SystemExit):
            cli.parse_args([*args, *wrong])


def write_manifest(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / "manifest.tsv"
    manifest.write_text(f"file\tlanguage\treference\n{JFK}\ten\t{JFK_TEXT}\n")
    return manifest


def test_bench_without_a_ct2_copy_is_bad_input(tiny_models, use_models, tmp_path, capsys):
    use_models(tiny_models)
    manifest = write_manifest(tmp_path / "clips")
    args = ["--main", "tiny-random-a", "--assistant", "self-int8", "--manifest", str(manifest)]
    assert cli.main([*args, "--reference", "--out", str(tmp_path / "out")]) == 2
    assert "error: " + NO_CT2.format(main="tiny-random-a") in capsys.readouterr().err


@pytest.mark.slow
def test_bench_reference_columns_and_json_keys(real_models, use_models, tmp_path, capsys):
    use_models(real_models)
    manifest, out = write_manifest(tmp_path / "clips"), tmp_path / "out"
    args = [*BENCH_ARGS, str(manifest), "--repeats", "1", "--reference", "--out", str(out)]
    assert cli.main(args) == 0
    stdout = capsys.readouterr().out
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert BENCH_KEYS <= summary.keys()
    assert summary["reference"] == "faster-whisper:int8"
    assert summary["reference_s"] > 0 and summary["reference_speedup"] > 0
    assert summary["reference_n_same_normalized_clips"] == 1 and summary["wer_reference"] < 0.3
    assert "speculative over reference (its time / the speculative" in stdout
    assert "ref ×" in stdout
    row = json.loads((out / "results.json").read_text())["clips"][0]
    assert row["reference"]["available"] and row["reference"]["wer"] is not None
    assert row["speculative_speedup_over_reference"] > 0
    # the clip's true text survives the reference engine's column beside it
    assert row["reference_text"] == JFK_TEXT
    assert row["normalized_reference_text"] == row["normalized_reference"] != ""
