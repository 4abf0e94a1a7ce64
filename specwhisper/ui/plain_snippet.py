""" "Run it yourself", snippet 1: the run's pair in plain transformers, `generate(...,
assistant_model=...)`, which anyone can run without this project (it imports no specwhisper).

Its `generate` arguments are rendered from decoding.generate_options and its assistant settings
from decoding.assistant_settings, the functions the run itself called, so it cannot describe
another run. Where the run used something of specwhisper's (the self-int8 assistant, a separate
encoder precision), the snippet builds it from torch and transformers alone. It is text:
nothing here runs a model.
"""

from __future__ import annotations

import ast
import inspect
import json
from collections.abc import Mapping
from typing import Any

from specwhisper import checkpoints, compare, decoding, loading, request_check
from specwhisper.request_check import CompareRequest
from specwhisper.ui.texts import APP_DIR
from specwhisper.ui.verdict import encoder_of

PLAIN_NEEDS = "torch, transformers and librosa"


def plain_snippet(result: Mapping[str, Any], req: CompareRequest) -> str:
    """transformers' assisted generation with the run's pair, dtype, γ and decoding."""
    main = checkpoints.resolve(result["main"], role="main")
    self_int8 = result["assistant"] == checkpoints.SELF_INT8
    encoder = encoder_of(result)
    mixed = encoder != result["dtype"]
    device = "cuda" if result["device"].startswith("cuda") else "cpu"
    lines = [
        "# 1. This run's pair in plain transformers: assisted generation, generate(...,",
        f"#    assistant_model=...). Needs {PLAIN_NEEDS}; not specwhisper.",
        *_plain_note(result, req),
        *_imports(self_int8, mixed, result["assistant"]),
        "",
        f'device, dtype = "{device}", torch.{result["dtype"]}',
        *([f"encoder_dtype = torch.{encoder}"] if mixed else []),
        *_main_loading(main, mixed),
    ]
    if self_int8:
        lines += _self_int8_building(result["dtype"])
    else:
        lines += _assistant_loading(main, result["assistant"], mixed)
    notes = {"num_assistant_tokens": "  # γ"}
    if req.gamma_schedule == "adaptive":  # transformers' own: confidence-based drafting
        notes["assistant_confidence_threshold"] = "  # adaptive: transformers' own rule"
    lines += [
        f"assistant.generation_config.{key} = {literal(value)}{notes.get(key, '')}"
        for key, value in decoding.assistant_settings(req.gamma, req.gamma_schedule).items()
    ]
    lines += ["", 'audio, _ = librosa.load("your-audio.wav", sr=16_000)']
    lines += _generate_call(result, req, main)
    return "\n".join(lines) + "\n"


def _plain_note(result: Mapping[str, Any], req: CompareRequest) -> list[str]:
    """What differs between the run and this plain version, in comment lines."""
    notes = []
    if result["engine"] == "specwhisper":
        notes.append(
            "#    The run used specwhisper's own loop (snippet 2); both keep the main's tokens "
            "exactly\n#    (sampling: its distribution, so the drawn tokens may differ)."
        )
    if req.fallback:
        notes.append(
            "#    transformers' assisted generation fails under Whisper's fallback recipe: this "
            "is the\n#    baseline's call, and only specwhisper's loop runs the recipe with "
            "an assistant."
        )
    timestamped = req.timestamps or result["duration_s"] > decoding.WINDOW_S
    if timestamped and not _decoder_only(result["assistant"]):
        notes.append(
            "#    With timestamps (and so over 30 s), transformers' assisted generation with a "
            "full Whisper\n#    assistant stops after the first segment: snippet 2 runs the "
            "whole audio."
        )
    if result["assistant"] == checkpoints.SELF_INT8:
        notes.append(
            "#    self-int8 is specwhisper's assistant; plain transformers has none, so it is "
            "built here\n#    from torch and transformers alone: the main's decoder, its Linear "
            "layers in dynamic int8."
        )
    return notes


def _imports(self_int8: bool, mixed: bool, assistant: str) -> list[str]:
    names = ["WhisperForConditionalGeneration", "WhisperProcessor"]
    if _decoder_only(assistant):
        names.insert(0, "WhisperForCausalLM")
    lines = ["import copy"] if self_int8 else []
    lines += ["import librosa", "import torch"]
    if self_int8:
        lines.append(
            "from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic"
        )
    if mixed:
        lines.append("from typing import Any")
    return [*lines, f"from transformers import {', '.join(names)}"]


def _decoder_only(assistant: str) -> bool:
    """A decoder-only assistant (self-int8 or distil-style), which reads the main's encoder."""
    if assistant == checkpoints.SELF_INT8:
        return True
    return checkpoints.resolve(assistant, role="assistant").decoder_only


def _main_loading(main: checkpoints.Checkpoint, mixed: bool) -> list[str]:
    lines = [
        f"processor = WhisperProcessor.from_pretrained({_quoted(_source(main))})",
        "main = WhisperForConditionalGeneration.from_pretrained(",
        f"    {_quoted(_source(main))}, dtype=dtype",
        ").to(device)",
    ]
    if mixed:  # the run's own helper, shown as it is: it needs only torch
        doc = "The encoder in encoder_dtype; the decoder gets its output in its own dtype."
        lines += ["", "", *_source_with_docstring(loading.set_encoder_dtype, doc), "", ""]
        lines.append("set_encoder_dtype(main, encoder_dtype)  # the decoder stays in dtype")
    return lines


def _source_with_docstring(function: Any, docstring: str) -> list[str]:
    """A function's source lines with another docstring (its own speaks of this project)."""
    lines = inspect.getsource(function).splitlines()
    doc = ast.parse("\n".join(lines)).body[0].body[0]  # the docstring's expression
    summary = f'{" " * doc.col_offset}"""{docstring}"""'
    return [*lines[: doc.lineno - 1], summary, *lines[doc.end_lineno :]]


def _self_int8_building(dtype: str) -> list[str]:
    """The self-int8 assistant from torch and transformers alone, as drafters.build_self_int8
    builds the one transformers' engine runs."""
    lines = [
        "config = copy.deepcopy(main.config)",
        'config.activation_function = "gelu_pytorch_tanh"  # a cheaper GELU for the draft',
        "assistant = WhisperForCausalLM(config).eval()",
        "assistant.model.decoder.load_state_dict(main.model.decoder.state_dict())",
        "assistant.proj_out.weight = torch.nn.Parameter(main.proj_out.weight.detach().clone())",
        "assistant = quantize_dynamic(",
        "    assistant.float(), {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8",
        ")",
        "assistant.generation_config = copy.deepcopy(main.generation_config)",
    ]
    if dtype != "float32":  # int8 dynamic layers take fp32 inputs only
        lines += [
            "",
            "",
            "def float32_encoder_states(module, args, kwargs):",
            '    if kwargs.get("encoder_hidden_states") is not None:',
            '        kwargs["encoder_hidden_states"] = kwargs["encoder_hidden_states"].float()',
            "    return args, kwargs",
            "",
            "",
            "assistant.model.decoder.register_forward_pre_hook(",
            "    float32_encoder_states, with_kwargs=True",
            ")",
        ]
    return lines


def _assistant_loading(
    main: checkpoints.Checkpoint, assistant_label: str, mixed: bool
) -> list[str]:
    """Loading code for an assistant checkpoint that from_pretrained reads."""
    assistant = checkpoints.resolve(assistant_label, role="assistant")
    if assistant.id == main.id and assistant.path == main.path:
        return ["assistant = main  # the main drafting for itself"]
    kind = "WhisperForCausalLM" if assistant.decoder_only else "WhisperForConditionalGeneration"
    lines = [
        f"assistant = {kind}.from_pretrained(",
        f"    {_quoted(_source(assistant))}, dtype=dtype",
        ").to(device)",
    ]
    if mixed and not assistant.decoder_only:  # its own encoder, like the main's
        lines.append("set_encoder_dtype(assistant, encoder_dtype)")
    return lines


def _generate_call(
    result: Mapping[str, Any], req: CompareRequest, main: checkpoints.Checkpoint
) -> list[str]:
    """The features and the `generate` call, its arguments from decoding.generate_options."""
    long_form = result["duration_s"] > decoding.WINDOW_S
    opts = compare.decode_options(req, main, request_check.language_code(result["language"]))
    options = decoding.generate_options(
        opts, multilingual=not main.english_only, long_form=long_form
    )
    lines = []
    if long_form:  # every frame, and the mask of the real ones
        lines += [
            "inputs = processor(",
            '    audio, sampling_rate=16_000, return_tensors="pt",',
            '    truncation=False, padding="longest", return_attention_mask=True,',
            ")",
        ]
    else:
        lines.append('inputs = processor(audio, sampling_rate=16_000, return_tensors="pt")')
    if req.fallback or req.temperature > 0:
        lines.append(f"torch.manual_seed({req.seed})  # sampling: the same seed repeats a run")
    arguments = [f"{key}={literal(value)}" for key, value in options.items()]
    if long_form:
        arguments.append("attention_mask=inputs.attention_mask.to(device)")
    if not req.fallback:  # transformers' assisted generation cannot run the recipe
        arguments.append("assistant_model=assistant")
    lines += [
        "out = main.generate(",
        "    inputs.input_features.to(device, dtype),",
        *(f"    {argument}," for argument in arguments),
        ")",
    ]
    if options.get("return_segments"):
        lines.append('ids = out["sequences"]  # with segments, generate returns a dict')
    else:
        lines.append("ids = out")
    return [*lines, "print(processor.batch_decode(ids, skip_special_tokens=True)[0])"]


def literal(value: Any) -> str:
    """A value as Python source: strings in double quotes, the rest as repr."""
    return _quoted(value) if isinstance(value, str) else repr(value)


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _source(ckpt: checkpoints.Checkpoint) -> str:
    """What from_pretrained takes for a checkpoint: its Hub id, or a local folder as the app's
    folder spells it (never the server's absolute path)."""
    if ckpt.path is None:
        return ckpt.id
    if ckpt.path.resolve().is_relative_to(APP_DIR):
        return ckpt.path.resolve().relative_to(APP_DIR).as_posix()
    return f"models/{ckpt.path.name}"
