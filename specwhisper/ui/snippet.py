""" "Run it yourself": the few lines of plain transformers that redo a run's speculative side
outside the Space. Where the run used something of specwhisper's (our loop, the self-int8
assistant, a separate encoder precision), the code names it with its import."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from specwhisper import decoding, models
from specwhisper.compare import CompareRequest
from specwhisper.schedule import draft_confidence
from specwhisper.ui.texts import APP_DIR
from specwhisper.ui.verdict import encoder_of


def reproduce_snippet(result: Mapping[str, Any], req: CompareRequest) -> str:
    """The few lines of plain transformers that redo this run's speculative side outside the
    Space: the pair, dtype, γ and `generate(..., assistant_model=...)`. Where the run used
    something of specwhisper's (our loop, the self-int8 assistant), it is named with its import."""
    main = models.resolve(result["main"], role="main")
    device = "cuda" if result["device"].startswith("cuda") else "cpu"
    encoder = encoder_of(result)
    mixed = encoder != result["dtype"]
    if result["assistant"] == models.SELF_INT8:
        head, body = _self_int8_loading(main, mixed)
    else:
        head, body = _pretrained_loading(main, result["assistant"], mixed)
    needs = "torch, transformers and librosa"
    if result["assistant"] == models.SELF_INT8 or mixed:
        needs += ", and this repository's specwhisper package"
    lines = [
        f"# The speculative run above, outside the Space; needs {needs}.",
        *head,
        "",
        f'device, dtype = "{device}", torch.{result["dtype"]}',
        *([f"encoder_dtype = torch.{encoder}"] if mixed else []),
        *body,
    ]
    schedule = "heuristic" if req.gamma_schedule == "heuristic" else "constant"
    threshold = 0.4 if req.gamma_schedule == "adaptive" else 0.0
    lines += [
        f"assistant.generation_config.num_assistant_tokens = {req.gamma}  # γ",
        f'assistant.generation_config.num_assistant_tokens_schedule = "{schedule}"',
        f"assistant.generation_config.assistant_confidence_threshold = {threshold}",
        "",
        'audio, _ = librosa.load("your-audio.wav", sr=16_000)',
    ]
    lines += _generate_call(result, req, main)
    if result["engine"] == "specwhisper":
        lines += _our_loop_note(req)
    return "\n".join(lines) + "\n"


def _imports() -> list[str]:
    return [
        "import librosa",
        "import torch",
        "from transformers import WhisperForConditionalGeneration, WhisperProcessor",
    ]


def _self_int8_loading(main: models.Checkpoint, mixed: bool) -> tuple[list[str], list[str]]:
    """(imports, loading code) for the self-int8 assistant: specwhisper's own, the main's
    decoder with its Linear layers in int8 (CPU only)."""
    head = _imports()
    head[-1] = "from specwhisper import drafters, models"
    body = [
        f"loaded = models.CACHE.get(models.resolve({_quoted(main.id)}), torch.device(device), "
        + ("dtype, encoder_dtype)" if mixed else "dtype)"),
        "main, processor = loaded.model, loaded.processor",
        "assistant = drafters.self_int8(loaded).model  # the main's decoder in int8",
    ]
    return head, body


def _pretrained_loading(
    main: models.Checkpoint, assistant_label: str, mixed: bool
) -> tuple[list[str], list[str]]:
    """(imports, loading code) for a pair of checkpoints that from_pretrained reads."""
    head = _imports()
    body = [
        f"processor = WhisperProcessor.from_pretrained({_quoted(_source(main))})",
        "main = WhisperForConditionalGeneration.from_pretrained(",
        f"    {_quoted(_source(main))}, dtype=dtype",
        ").to(device)",
    ]
    if mixed:  # the encoder alone in another precision: specwhisper's helper does the casts
        head.append("from specwhisper.models import set_encoder_dtype")
        body.append("set_encoder_dtype(main, encoder_dtype)  # decoder stays in dtype")
    assistant = models.resolve(assistant_label, role="assistant")
    if assistant.id == main.id and assistant.path == main.path:
        body.append("assistant = main  # the main drafting for itself")
        return head, body
    kind = "WhisperForConditionalGeneration"
    if assistant.decoder_only:  # a distil decoder reading the main's encoder outputs
        kind = "WhisperForCausalLM"
        head[-1] = head[-1].replace("import ", "import WhisperForCausalLM, ")
    body += [
        f"assistant = {kind}.from_pretrained(",
        f"    {_quoted(_source(assistant))}, dtype=dtype",
        ").to(device)",
    ]
    if mixed and not assistant.decoder_only:  # its own encoder, like the main's
        body.append("set_encoder_dtype(assistant, encoder_dtype)")
    return head, body


def _generate_call(
    result: Mapping[str, Any], req: CompareRequest, main: models.Checkpoint
) -> list[str]:
    """The features and the `generate` call, with this run's language, task and decoding."""
    lines = []
    options = []  # English-only mains take no language or task (generate refuses them)
    if not main.english_only and result["language"] != "auto":
        options.append(f"language={_quoted(result['language'])}")
    if not main.english_only and result["task"]:
        options.append(f"task={_quoted(result['task'])}")
    if result["duration_s"] > decoding.WINDOW_S:  # long-form: all frames, and their mask
        lines += [
            "inputs = processor(",
            '    audio, sampling_rate=16_000, return_tensors="pt",',
            '    truncation=False, padding="longest", return_attention_mask=True,',
            ")",
        ]
        options += ["attention_mask=inputs.attention_mask.to(device)", "return_timestamps=True"]
    else:
        lines.append('inputs = processor(audio, sampling_rate=16_000, return_tensors="pt")')
        options += ["return_timestamps=True"] if req.timestamps else []
    if req.fallback:  # Whisper's recipe, as decoding.FALLBACK passes it
        options += [f"{key}={value!r}" for key, value in decoding.FALLBACK.items()]
    elif req.temperature > 0:
        options += ["do_sample=True", f"temperature={req.temperature:g}"]
    if req.fallback or req.temperature > 0:
        lines.append(f"torch.manual_seed({req.seed})  # sampling: the same seed repeats a run")
    if req.fallback:  # transformers' assisted generation cannot run the recipe
        lines.append(
            "# The baseline's call: transformers' assisted generation fails under Whisper's "
            "fallback,\n# so only specwhisper's loop (below) runs it with the assistant."
        )
    return [
        *lines,
        "ids = main.generate(",
        "    inputs.input_features.to(device, dtype),",
        *([] if req.fallback else ["    assistant_model=assistant,"]),
        *(f"    {option}," for option in options),
        ")",
        "print(processor.batch_decode(ids, skip_special_tokens=True)[0])",
    ]


def _our_loop_note(req: CompareRequest) -> list[str]:
    """Comment lines naming specwhisper's loop, and what of it transformers has no setting for."""
    lines = [
        "",
        "# This run used specwhisper's own speculative loop instead of generate's assisted",
        "# loop; both keep exactly the main model's greedy tokens (sampling: its"
        " distribution). Ours is",
        "#   from specwhisper.decoding import decode_speculative",
    ]
    if req.gamma_schedule == "adaptive":
        stop = (  # greedy drafts only (the fallback's greedy windows too)
            f", each draft stopping after a token\n# it gives under {draft_confidence():g} "
            "probability"
            if req.temperature == 0
            else ""
        )
        lines.append(
            f"# and its adaptive γ (from the measured acceptance and costs{stop}) has no "
            "transformers setting;\n# above, transformers' own confidence-based drafting."
        )
    return lines


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _source(ckpt: models.Checkpoint) -> str:
    """What from_pretrained takes for a checkpoint: its Hub id, or a local folder as the app's
    folder spells it (never the server's absolute path)."""
    if ckpt.path is None:
        return ckpt.id
    if ckpt.path.resolve().is_relative_to(APP_DIR):
        return ckpt.path.resolve().relative_to(APP_DIR).as_posix()
    return f"models/{ckpt.path.name}"
