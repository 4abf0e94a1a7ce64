""" "Run it yourself": two snippets that redo a run's speculative side outside the Space, each
with the settings the run used.

1. Plain transformers (plain_snippet): `generate(..., assistant_model=...)` with the same pair,
   which anyone can run without this project.
2. This project's loop (here): specwhisper's own speculative decoding with the run's request,
   its install line and the γ schedule it used.

The snippets are text: nothing here runs a model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specwhisper import checkpoints, decoding
from specwhisper.request_check import CompareRequest
from specwhisper.schedule import draft_confidence, draft_stops_early
from specwhisper.ui.plain_snippet import literal, plain_snippet
from specwhisper.ui.verdict import encoder_of

OURS_INSTALL = "in a copy of this Space's folder: pip install -e ."


@dataclass(frozen=True)
class Snippets:
    """The two ways to redo a run, each a runnable Python file."""

    plain: str  # transformers' assisted generation with the run's pair; no specwhisper
    loop: str  # specwhisper's loop with the run's request


def snippets(result: Mapping[str, Any], req: CompareRequest) -> Snippets:
    """Both snippets for a run: `result` is its API JSON, `req` the request it ran."""
    return Snippets(plain=plain_snippet(result, req), loop=loop_snippet(result, req))


def reproduce_snippet(result: Mapping[str, Any], req: CompareRequest) -> str:
    """Both snippets as one file: the plain one runs as shown, and specwhisper's follows as
    comments (one file prints one transcript; the page can show each on its own)."""
    both = snippets(result, req)
    loop = [_commented(line) for line in both.loop.rstrip("\n").splitlines()]
    return both.plain + "\n" + "\n".join(loop) + "\n"


def _commented(line: str) -> str:
    if line.startswith("#"):
        return line
    return f"# {line}" if line else "#"


# What our loop does differently from generate's even where it drafts nothing
# (BENCHMARKS.md#time-loop): part of the speculative column's gain over plain generate.
LEANER_LOOP = (
    "#    Even without drafting our loop is leaner than generate's: it projects to logits",
    "#    through a [D, V] copy of the output matrix, applies Whisper's suppression masks built",
    "#    once per call rather than per token, and skips generate's per-step bookkeeping.",
)


def loop_snippet(result: Mapping[str, Any], req: CompareRequest) -> str:
    """specwhisper's speculative loop with the run's request (our engine where it ran
    transformers'), its install line and the γ schedule it used."""
    request = _loop_request(result, req)
    default = CompareRequest(main=request.main, assistant=request.assistant)
    shown = ("main", "assistant", "gamma", "gamma_schedule")  # the rest where not the default
    arguments = [
        f"    {f.name}={literal(getattr(request, f.name))},"
        for f in dataclasses.fields(request)
        if f.name not in ("repeats", "loop_alone")  # timing settings: one decode here
        and (f.name in shown or getattr(request, f.name) != getattr(default, f.name))
    ]
    lines = [
        "# 2. This run in specwhisper's own speculative loop (the speculative column), with the",
        f"#    run's settings. Install: {OURS_INSTALL}",
        *LEANER_LOOP,
    ]
    if result["engine"] != "specwhisper":
        lines.append("#    The run itself used transformers' assisted loop: snippet 1.")
    lines += [
        *_schedule_note(request),
        "from specwhisper import compare, decoding, request_check",
        "from specwhisper.audio import load_audio",
        "from specwhisper.decoding import decode_speculative",
        "",
        "req = request_check.CompareRequest(",
        *arguments,
        ")",
        "checked = request_check.check_request(req)",
        "main, assistant, _ = compare.load_pair(checked)",
        'features = decoding.prepare_features(main, load_audio("your-audio.wav").samples)',
        "opts = compare.decode_options(req, main.checkpoint, checked.language)",
        "print(decode_speculative(main, assistant, features, opts).text)",
    ]
    return "\n".join(lines) + "\n"


def _loop_request(result: Mapping[str, Any], req: CompareRequest) -> CompareRequest:
    """The request that redoes the run in our loop, read from what ran (the result), and from
    the request where the result does not say."""
    main = checkpoints.resolve(result["main"], role="main")
    assistant = result["assistant"]
    if assistant != checkpoints.SELF_INT8:
        assistant = checkpoints.resolve(assistant, role="assistant").id
    encoder = encoder_of(result)
    decoded = result.get("decoding")
    return CompareRequest(
        main=main.id,
        assistant=assistant,
        # English-only mains take no language or task (generate refuses them)
        language="auto" if main.english_only else result["language"],
        task="transcribe" if main.english_only else result["task"] or req.task,
        gamma=result.get("gamma", req.gamma),
        gamma_schedule=result.get("gamma_schedule", req.gamma_schedule),
        dtype=req.dtype,
        encoder_dtype=encoder if encoder != result["dtype"] else "auto",
        timestamps=req.timestamps,
        engine="specwhisper",
        temperature=result.get("temperature", req.temperature),
        seed=result.get("seed", req.seed),
        fallback=req.fallback if decoded is None else decoded == "fallback",
    )


def _schedule_note(req: CompareRequest) -> list[str]:
    """The γ schedule our loop ran, in comment lines."""
    if req.gamma_schedule == "constant":
        return [f"#    γ schedule: constant, {req.gamma} draft tokens every step."]
    if req.gamma_schedule == "heuristic":
        return [
            f"#    γ schedule: heuristic, from {req.gamma}: +2 after a fully accepted draft, -1 "
            "otherwise."
        ]
    max_gamma = decoding.DecodeOptions().max_gamma
    lines = [
        f"#    γ schedule: adaptive, from {req.gamma}: before each draft, the γ from 0 to "
        f"{max_gamma} with",
        "#    the most tokens per second under Leviathan et al.'s model, from the acceptance "
        "and costs",
        "#    measured so far.",
    ]
    stops = draft_stops_early(
        req.engine, req.gamma_schedule, sampling=req.temperature > 0, batched=False
    )
    if stops and draft_confidence() > 0:
        lines.append(
            f"#    Each greedy draft stops after a token it gives under {draft_confidence():g} "
            "probability."
        )
    return lines
