"""The result's headline and its two columns, as HTML: IDENTICAL or MISMATCH (with where the
outputs part), the speed-up measured and predicted (with timebars' spread note, bound line and
bars), what each part ran in, and per column the transcript, timing and counts; or, when a run
failed, its sentence in the headline's place. Reads the compare JSON; decodes and times
nothing."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from specwhisper.compare import SAMPLING_NOTE
from specwhisper.ui.texts import BF16_ENCODER_QUALITY, LOOP_ALONE_LABEL
from specwhisper.ui.timebars import bound_line, render_time_bars, spread_note
from specwhisper.ui.tokens import text_of

CONTEXT_TOKENS = 8  # tokens shown on each side of a divergence


def badge(text: str, color: str) -> str:
    """A bold white word on a coloured pill."""
    return (
        f'<span style="background: {color}; color: white; font-weight: 800; padding: 3px 10px; '
        f'border-radius: 6px; letter-spacing: 0.05em">{text}</span>'
    )


def render_verdict(result: Mapping[str, Any], pieces: Mapping[int, str]) -> str:
    """The headline: IDENTICAL or MISMATCH; the measured speed-up (or that it is within the
    spread of the repeats), the main passes saved and what bounds the gain here; where each
    column's time went; the predicted speed-up and the setup."""
    spec = result["speculative"]
    predicted = (
        f"Predicted: <b>{result['predicted_end_to_end']:.2f}×</b> end to end. The decoding loop "
        f"alone would gain {result['predicted_speedup']:.2f}× by Leviathan et al.'s formula, from "
        f"the measured acceptance ({100 * spec['acceptance_rate']:.0f}%), the cost ratio "
        f"c = {result['cost_ratio']:.2f} (one draft token's time over one main step's) and the "
        f"mean γ = {result['mean_gamma']:.1f}; the end-to-end figure adds what both sides pay, "
        "the baseline's measured encoder time and its overhead per main pass."
    )
    loaded = (
        f"Models loaded in {result['load_time_s']:.1f} s (not included in timings)"
        if result["load_time_s"] > 0
        else "Models were cached (no load time)"
    )
    setup = " · ".join(
        [
            f"{result['duration_s']:.1f} s of audio",
            html.escape(result["device"]),
            html.escape(precision_line(result)),
            f"engine {html.escape(result['engine'])}",
            loaded,
        ]
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in result.get("audio_notes", []))
    precision = precision_note(result["dtype"], encoder_of(result))
    return (
        '<div style="padding: 12px 0">'
        f'<div style="font-size: 1.05em; margin-bottom: 10px">{_sameness(result, pieces)}</div>'
        + (f'<div style="margin-bottom: 10px">{html.escape(precision)}</div>' if precision else "")
        + _speedup_headline(result)
        + _attribution(result)
        + f'<div style="margin: 4px 0 10px">{html.escape(bound_line(result))}</div>'
        + (render_time_bars(result) if "encoder_s" in result["baseline"] else "")
        + f'<div style="opacity: 0.85; margin-top: 10px">{predicted}</div>'
        f'<div style="opacity: 0.7; margin-top: 6px; font-size: 0.9em">{setup}</div>'
        + (f'<ul style="margin-top: 6px">{notes}</ul>' if notes else "")
        + "</div>"
    )


def _speedup_headline(result: Mapping[str, Any]) -> str:
    """The speed-up in large type, with "faster", or with why it is not a result; and the main
    decoder passes of both columns, the clearest sign of what the assistant did."""
    speedup = result["speedup"]
    spread = spread_note(result["baseline"]["times_s"], result["speculative"]["times_s"])
    if spread:
        number, beside = f"{speedup:.2f}×", spread
        size = "1.8em"  # not printed as a result: smaller, and the sentence says why
    else:
        number = f"{speedup:.2f}×"
        beside = "faster" if speedup >= 1 else "slower than the baseline on this run"
        size = "2.6em"
    passes = (
        f"main passes {result['baseline']['n_main_forwards']} → "
        f"{result['speculative']['n_main_forwards']}"
    )
    return (
        '<div style="display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 16px">'
        f'<span style="font-size: {size}; font-weight: 800">{number}</span>'
        f'<span style="font-size: 1.2em">{html.escape(beside)}</span>'
        f'<span style="font-size: 1.2em; font-weight: 700">{passes}</span></div>'
    )


def attribution_line(result: Mapping[str, Any]) -> str:
    """How much of our column's speed-up is drafting: split by the run's own timed γ-0 side
    when it ran, else said to include our loop's own gain (empty for transformers' engine,
    whose loop is generate's own)."""
    if result.get("engine", "specwhisper") != "specwhisper":
        return ""
    alone = result.get("loop_alone")
    if alone is not None:
        loop, drafting = result["loop_alone_speedup"], result["speculative_speedup_over_loop_alone"]
        same = "" if alone.get("identical", True) else " (its tokens differ: see the JSON)"
        return (
            f"Split, measured in this run's timed rounds: our loop without drafting (γ 0, one "
            f"main pass per token as plain generate makes, {alone['time_s']:.3f} s{same}) is "
            f"{loop:.2f}× the baseline, and drafting makes it {drafting:.2f}× faster again: "
            f"{loop:.2f}× × {drafting:.2f}× = {result['speedup']:.2f}×."
        )
    if result.get("gamma") == 0:
        return "Nothing was drafted (γ 0): this speed-up is our leaner loop's alone."
    return (
        "This is our speculative loop against plain generate: the speed-up includes our leaner "
        f"loop's own gain, not only drafting's. Tick \"{LOOP_ALONE_LABEL}\" (Advanced) to "
        "split it."
    )


def _attribution(result: Mapping[str, Any]) -> str:
    line = attribution_line(result)
    return f'<div style="margin: 4px 0">{html.escape(line)}</div>' if line else ""


def render_error(message: str) -> str:
    """A failed run's sentence where the verdict would be, in place of any older result."""
    return (
        '<div role="alert" style="border: 2px solid #dc2626; border-radius: 8px; '
        'padding: 10px 12px; margin: 12px 0">'
        f"{badge('NOT COMPARED', '#dc2626')}"
        f'<div style="margin-top: 8px; font-size: 1.1em">{html.escape(message)}</div></div>'
    )


def _sameness(result: Mapping[str, Any], pieces: Mapping[int, str]) -> str:
    """The verdict's first line: IDENTICAL, SAME DISTRIBUTION (sampled runs) or the MISMATCH
    box; then, for sampled runs, which decoding ran."""
    sampled = result.get("decoding", "greedy") != "greedy"
    if result["identical"]:
        same = (
            f"{badge('IDENTICAL', '#15803d')} The speculative output has the same "
            f"{len(result['baseline']['token_ids'])} token ids as the baseline."
        )
    elif sampled and any(t > 0 for t in _temperatures(result)):
        same = f"{badge('SAME DISTRIBUTION', '#2563eb')} {html.escape(SAMPLING_NOTE)}"
    else:
        same = render_mismatch(result, pieces)
    if sampled:
        same += f'<div style="margin-top: 6px">{html.escape(decoding_line(result))}</div>'
    return same


def _temperatures(result: Mapping[str, Any]) -> list[float]:
    """The temperatures the speculative side decoded at (one per window with the fallback)."""
    if result.get("decoding") == "sampling":
        return [result["temperature"]]
    return list(result["speculative"].get("window_temperatures", []))


def decoding_line(result: Mapping[str, Any]) -> str:
    """Which decoding ran, and with the fallback where each window ended, on both sides."""
    if result["decoding"] == "sampling":
        return f"Sampling at temperature {result['temperature']:g}, seed {result['seed']}."
    ends = []
    for name in ("baseline", "speculative"):
        temps = result[name].get("window_temperatures", [])
        fell = [f"window {i + 1} at {t:g}" for i, t in enumerate(temps) if t > 0]
        ends.append(f"{name}: " + (", ".join(fell) if fell else "every window stayed greedy"))
    return (
        "Whisper's temperature fallback (greedy windows stay token for token; a window that "
        f"fell back is sampled, seed {result['seed']}). " + "; ".join(ends) + "."
    )


def encoder_of(result: Mapping[str, Any]) -> str:
    """The main's encoder precision (results made before it was recorded: `dtype`)."""
    return result.get("encoder_dtype") or result["dtype"]


def precision_line(result: Mapping[str, Any]) -> str:
    """What each part ran in, e.g. "encoder bfloat16, decoder float32, draft int8 weights"; the
    plain dtype where the main is all one precision and no int8 draft ran."""
    parts = result.get("precision")
    if not parts or set(parts.values()) == {result["dtype"]}:
        return result["dtype"]
    return ", ".join(f"{part} {dtype}" for part, dtype in parts.items())


def precision_note(dtype: str, encoder_dtype: str | None = None) -> str:
    """What half precision means for "token for token" (empty in float32 throughout)."""
    if dtype == "float32":
        if encoder_dtype in (None, "", "float32"):
            return ""
        return (
            f"The encoder ran in {encoder_dtype} for both columns, and the decoder in float32: "
            "the speculative side verifies in float32, so the columns stay token for token. "
            "Against an all-float32 run the shared encoder output rounds differently, so a "
            f"transcript can change a little ({BF16_ENCODER_QUALITY})."
        )
    return (
        f"Run in {dtype}: half precision can change a token. The speculative side checks γ + 1 "
        "tokens in one pass of the main model, and a matrix product over γ + 1 rows rounds "
        "differently from the baseline's one-row steps, so where two tokens are nearly tied "
        "the other one can win. In float32 the outputs are the same token for token; in half "
        "precision a MISMATCH shows where they part."
    )


def render_mismatch(result: Mapping[str, Any], pieces: Mapping[int, str]) -> str:
    """A MISMATCH box: where the token ids first differ and both texts around that point."""
    base_ids, spec_ids = result["baseline"]["token_ids"], result["speculative"]["token_ids"]
    at = result["first_divergence"]  # may equal the length of the shorter output
    start = max(0, at - CONTEXT_TOKENS)
    common = html.escape(text_of(base_ids[start:at], pieces))
    lines = []
    for name, ids in (("Baseline", base_ids), ("Speculative", spec_ids)):
        tail = text_of(ids[at : at + CONTEXT_TOKENS], pieces) if at < len(ids) else "(ends here)"
        lines.append(
            f"<div><b>{name}:</b> …{common}"
            f'<mark style="background: #fecaca; color: #7f1d1d">{html.escape(tail)}</mark>…</div>'
        )
    return (
        '<div style="border: 2px solid #dc2626; border-radius: 8px; padding: 10px">'
        f"{badge('MISMATCH', '#dc2626')} The outputs differ from token {at} on "
        f"({len(base_ids)} baseline tokens, {len(spec_ids)} speculative). Greedy speculative "
        "decoding reproduces the baseline exactly in float32; in half precision, verifying "
        "several tokens in one pass can round differently and flip a near-tie."
        f'<div style="margin-top: 8px; font-family: monospace">{"".join(lines)}</div></div>'
    )


def render_side(result: Mapping[str, Any], side: str) -> str:
    """One column: transcript, timing (and how it was measured), token and pass counts."""
    r = result[side]
    runs = ", ".join(f"{t:.3f}" for t in r["times_s"])
    rows = [
        ("Generation time", f"{r['time_s']:.3f} s", f"{result['timing']}; runs: {runs} s"),
        ("Tokens generated", str(r["n_tokens"]), ""),
        ("Tokens/s", f"{r['tokens_per_s']:.1f}", ""),
        ("Main forward passes", str(r["n_main_forwards"]), ""),
    ]
    if side == "speculative":
        title, what = "Speculative", f"{result['main']} + {result['assistant']} drafting"
        if result.get("engine", "specwhisper") == "specwhisper":
            what += ", in our speculative loop"
        rows += [
            (
                "Acceptance rate",
                f"{100 * r['acceptance_rate']:.1f}%",
                f"{r['n_accepted']} of {r['n_draft_tokens']} drafted tokens",
            ),
            ("Tokens per main forward", f"{r['tokens_per_main_forward']:.2f}", ""),
            ("Speed-up", f"<b>{result['speedup']:.2f}×</b>", "baseline time / speculative time"),
        ]
    else:
        title, what = "Baseline", f"{result['main']} alone, greedy"
    border = "#dc2626" if not result["identical"] else "rgba(128, 128, 128, 0.35)"
    segments = "".join(
        f'<div><span style="font-family: monospace; opacity: 0.7">'
        f"[{s['start_s']:.2f}–{s['end_s']:.2f}]</span> {html.escape(s['text'])}</div>"
        for s in r.get("segments", [])
    )
    return (
        f'<div style="border: 1px solid {border}; border-radius: 8px; padding: 12px">'
        f'<div style="font-size: 1.3em; font-weight: 700">{title}</div>'
        f'<div style="opacity: 0.7; font-size: 0.9em">{html.escape(what)}</div>'
        f'<p style="font-size: 1.1em; margin: 10px 0">{html.escape(r["text"]) or "<i>(empty)</i>"}'
        "</p>"
        + (f'<div style="margin-bottom: 10px">{segments}</div>' if segments else "")
        + f"{figures_table(rows)}</div>"
    )


def figures_table(rows: list[tuple[str, str, str]]) -> str:
    """A column's figures: (name, value as HTML, how it was measured, as plain text) a row."""
    cells = "".join(
        f'<tr><td style="padding: 3px 8px 3px 0; opacity: 0.8">{name}</td>'
        f'<td style="padding: 3px 8px"><b>{value}</b>'
        + (f'<div style="font-size: 0.8em; opacity: 0.7">{html.escape(how)}</div>' if how else "")
        + "</td></tr>"
        for name, value, how in rows
    )
    return f'<table style="border-collapse: collapse; width: 100%">{cells}</table>'
