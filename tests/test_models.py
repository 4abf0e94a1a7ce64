"""Checkpoint registry, pair compatibility, safe resolution and the self-int8 draft."""

from __future__ import annotations

import json

import pytest
import torch

from specwhisper import checkpoints, decoding, drafters, loading
from specwhisper.checkpoints import CheckpointError, pair_problem, resolve


def hub(name: str) -> checkpoints.Checkpoint:
    return resolve(name, role="assistant")


@pytest.mark.parametrize(
    "main, assistant",
    [
        ("openai/whisper-large-v2", "distil-whisper/distil-large-v2"),
        ("openai/whisper-large-v3", "distil-whisper/distil-large-v3"),
        ("openai/whisper-large-v2", "openai/whisper-tiny"),
        ("openai/whisper-medium.en", "distil-whisper/distil-medium.en"),
        ("openai/whisper-small.en", "openai/whisper-tiny.en"),
        ("openai/whisper-base", "openai/whisper-base"),
        ("openai/whisper-large-v3", checkpoints.SELF_INT8),
    ],
)
def test_compatible_pairs(main, assistant):
    other = assistant if assistant == checkpoints.SELF_INT8 else hub(assistant)
    assert pair_problem(resolve(main), other) is None


@pytest.mark.parametrize(
    "main, assistant, words",
    [
        ("openai/whisper-large-v3", "openai/whisper-tiny", "tokenizers differ"),
        ("openai/whisper-large-v3-turbo", "distil-whisper/distil-large-v2", "tokenizers differ"),
        ("openai/whisper-medium", "distil-whisper/distil-large-v2", "distilled from"),
        ("openai/whisper-base", "openai/whisper-tiny.en", "tokenizers differ"),
    ],
)
def test_incompatible_pairs_say_why(main, assistant, words):
    assert words in pair_problem(resolve(main), hub(assistant))


def test_resolve_rejects_unknown_ids_and_paths_outside_the_models_folder(tmp_path, use_models):
    use_models(tmp_path)
    for bad, words in [
        ("openai/whisper-huge-v9", "not in the list"),
        ("someone/evil-model", "Unknown main checkpoint"),
        ("../../etc", "outside"),
        ("./../x", "outside"),
        ("/etc", "outside"),
        ("", "Pick a main checkpoint"),
    ]:
        with pytest.raises(CheckpointError, match=words):
            resolve(bad)


def test_local_folders_are_listed_and_broken_ones_explained(tiny_models, use_models, tmp_path):
    root = use_models(tmp_path / "models")
    root.mkdir()
    for name in ("tiny-random-a", "tiny-random-decoder"):
        (root / name).symlink_to(tiny_models / name, target_is_directory=True)
    broken = root / "half-copied"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "whisper"}))
    found = checkpoints.local_checkpoints(root)
    assert set(found) == {"tiny-random-a", "tiny-random-decoder"}
    assert found["tiny-random-decoder"].decoder_only
    with pytest.raises(CheckpointError, match="no .safetensors"):
        resolve("half-copied")
    main = resolve("tiny-random-a")
    assert [c.id for c in checkpoints.main_choices(include_hub=False)] == ["tiny-random-a"]
    cpu = checkpoints.assistant_choices(main, include_hub=False, on_gpu=False)
    assert cpu[0] == checkpoints.SELF_INT8 and "tiny-random-decoder (local)" in cpu
    assert checkpoints.SELF_INT8 not in checkpoints.assistant_choices(
        main, include_hub=False, on_gpu=True
    )


def test_hub_ids_fail_clearly_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: nothing to fall back on
    with pytest.raises(CheckpointError, match="offline mode"):
        loading.ModelCache().get(resolve("openai/whisper-tiny"), torch.device("cpu"), torch.float32)


def test_self_int8_is_the_main_decoder_in_int8(tiny_models):
    cache = loading.ModelCache()
    main = cache.get(
        checkpoints._local_checkpoint(tiny_models / "tiny-random-a"),
        torch.device("cpu"),
        torch.float32,
    )
    draft = drafters.self_int8(main, cache)
    assert drafters.self_int8(main, cache) is draft  # built once, then cached
    linears = [m for m in draft.model.modules() if type(m) is torch.nn.Linear]
    quantized = [
        m for m in draft.model.modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)
    ]
    assert not linears and len(quantized) > 0
    assert draft.checkpoint.decoder_only and draft.checkpoint.family == main.checkpoint.family


def test_one_models_folder_with_home_expanded(monkeypatch, tmp_path):
    from specwhisper import offline

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SPECWHISPER_MODELS", "~/weights")
    assert checkpoints.models_dir() == tmp_path.resolve() / "weights"
    assert offline.models_dir is checkpoints.models_dir  # the converter writes where the app reads


def test_self_int8_is_cached_per_main_dtype(tiny_models):
    cache = loading.ModelCache()
    ckpt = checkpoints._local_checkpoint(tiny_models / "tiny-random-a")
    fp32 = cache.get(ckpt, torch.device("cpu"), torch.float32)
    bf16 = cache.get(ckpt, torch.device("cpu"), torch.bfloat16)
    draft_fp32, draft_bf16 = drafters.self_int8(fp32, cache), drafters.self_int8(bf16, cache)
    assert draft_fp32 is not draft_bf16  # each is built from its own main's (rounded) weights
    assert drafters.self_int8(bf16, cache) is draft_bf16
    assert drafters.self_int8(fp32, cache) is draft_fp32


def test_self_int8_reads_half_precision_encoder_outputs(tiny_models):
    """Issue 14 bug 5: transformers' assisted generation hands the int8 draft the main's
    encoder outputs in the main's dtype; int8 dynamic Linear layers take fp32 only."""
    from transformers.modeling_outputs import BaseModelOutput

    cache = loading.ModelCache()
    ckpt = checkpoints._local_checkpoint(tiny_models / "tiny-random-a")
    main = cache.get(ckpt, torch.device("cpu"), torch.bfloat16)
    draft = drafters.self_int8(main, cache)
    torch.manual_seed(0)
    features = torch.randn(1, 80, 3000, dtype=torch.bfloat16)
    with torch.inference_mode():
        hidden = main.model.get_encoder()(features).last_hidden_state  # [1, 1500, D] bf16
        ids = torch.tensor([[main.model.generation_config.decoder_start_token_id]])
        half = draft.model(input_ids=ids, encoder_outputs=BaseModelOutput(hidden)).logits
        full = draft.model(input_ids=ids, encoder_outputs=(hidden.float(),)).logits
    assert hidden.dtype == torch.bfloat16 and half.dtype == torch.float32
    assert torch.equal(half, full)


def test_refusals_never_show_the_servers_absolute_models_folder(tiny_models, use_models):
    use_models(tiny_models)
    for name in ("no-such-model", "../../etc"):
        with pytest.raises(checkpoints.CheckpointError) as caught:
            checkpoints.resolve(name)
        assert str(tiny_models) not in str(caught.value)
        assert tiny_models.name in str(caught.value)


# --- transformers' notices about its own calls -------------------------------------------------


@pytest.fixture
def transformers_log():
    """Records every transformers notice at warning level and above, with warning_once's memory
    cleared first (it logs each message once per process)."""
    import logging

    from transformers.utils import logging as transformers_logging

    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    root = logging.getLogger("transformers")
    handler, level = Collect(logging.WARNING), transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_warning()
    logging.Logger.warning_once.cache_clear()
    root.addHandler(handler)
    yield records
    root.removeHandler(handler)
    transformers_logging.set_verbosity(level)


def test_a_decode_logs_no_generation_config_deprecation(app_models, use_models, transformers_log):
    """transformers' Whisper generate passes its own generation_config with suppress_tokens
    kwargs; the notice it then logs about itself is filtered, and only that one."""
    import logging

    import numpy as np

    use_models(app_models)
    main = loading.ModelCache().get(resolve("tiny-random-a"), torch.device("cpu"), torch.float32)
    features = decoding.prepare_features(main, np.zeros(16000, dtype=np.float32))
    decode = lambda: decoding.decode_baseline(main, features, decoding.DecodeOptions())  # noqa: E731
    notice = "Passing `generation_config` together with generation-related"

    decode()
    assert not [m for m in transformers_log if notice in m]

    utils_log = logging.getLogger("transformers.generation.utils")
    (own_calls,) = [f for f in utils_log.filters if isinstance(f, decoding.TransformersOwnCalls)]
    utils_log.removeFilter(own_calls)
    try:
        logging.Logger.warning_once.cache_clear()
        decode()  # without the filter transformers still says it: the filter is still needed
        assert [m for m in transformers_log if notice in m]
    finally:
        utils_log.addFilter(own_calls)
    utils_log.warning(f"{notice} arguments=({{'top_k'}}) is deprecated")
    assert transformers_log[-1].startswith(notice), "a notice about our own arguments was hidden"


def test_an_unknown_checkpoint_is_told_each_way_to_name_one(tmp_path, use_models):
    use_models(tmp_path)
    folder = checkpoints.shown(tmp_path)
    with pytest.raises(CheckpointError) as main:
        resolve("no-such-model")
    assert str(main.value) == (
        f"Unknown main checkpoint 'no-such-model'. Use a listed Hub id or a folder in {folder}."
    )
    with pytest.raises(CheckpointError) as assistant:
        resolve("no-such-model", role="assistant")
    assert str(assistant.value) == (
        "Unknown assistant checkpoint 'no-such-model'. Use a listed Hub id, a folder in "
        f"{folder}, or 'self-int8'."
    )
