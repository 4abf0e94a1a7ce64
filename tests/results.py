"""A compare result as the API returns it, for the renderers' tests: the JSON of a real
`Comparison` (Comparison.to_dict) of real DecodeResults, so its keys cannot drift from the API's.

A test picks the numbers it reads by key; a key the API does not have is refused, not added.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specwhisper.compare import Comparison, Setup
from specwhisper.decoding import DecodeResult
from specwhisper.loop import DraftStep
from specwhisper.request_check import CompareRequest

SIDES = ("baseline", "speculative")
# keys side_json writes only when a run has them (timestamps, the fallback recipe)
OPTIONAL_SIDE_KEYS = {"segments", "window_temperatures"}


def api_result(
    baseline: DecodeResult,
    speculative: DecodeResult,
    times_s: tuple[tuple[float, ...], tuple[float, ...]],
    /,
    **changes: Any,
) -> dict[str, Any]:
    """Comparison.to_dict() of these runs (and the `audio_notes` the handler adds), with
    `changes` put over its keys: a side's dict is merged, any other value replaces."""
    request = CompareRequest(main="whisper-base", assistant="self-int8")
    setup = Setup(
        main="whisper-base (local)",
        assistant="self-int8",
        main_revision=None,
        assistant_revision=None,
        device="cpu (2 threads)",
        dtype="float32",
        encoder_dtype="float32",
        assistant_dtype="int8",
        draft_cross_attention="fp32",
        language=None,
        task="transcribe",
        load_time_s=0.0,
        duration_s=11.0,
    )
    result = Comparison(request, setup, baseline, speculative, *times_s).to_dict()
    result["audio_notes"] = []  # handlers.compare_run adds the audio's notes
    return changed(result, changes)


def changed(result: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`result` with `changes` over it; only keys it has."""
    out = dict(result)
    for key, value in changes.items():
        if key not in out:
            raise KeyError(f"the compare API has no key {key!r}")
        if key in SIDES:
            unknown = set(value) - set(out[key]) - OPTIONAL_SIDE_KEYS
            if unknown:
                raise KeyError(f"the compare API's {key} has no keys {sorted(unknown)}")
            out[key] = out[key] | value
        else:
            out[key] = value
    return out


def run(engine: str, **fields: Any) -> DecodeResult:
    """A DecodeResult of `engine` ("generate" for the baseline) with these fields."""
    fields.setdefault("n_tokens", len(fields["token_ids"]))
    return DecodeResult(engine=engine, **fields)


def step(drafted: tuple[int, ...], n_accepted: int, main_token: int | None) -> DraftStep:
    return DraftStep(drafted=drafted, n_accepted=n_accepted, main_token=main_token)


def synthetic_result(**changes) -> dict:
    """A compare result as the API returns it (a real Comparison's JSON), small enough to read."""
    # Prefill gives token 1 (a step with no draft); step 2 drafts 2, 3, 9 and keeps 2, 3, then
    # the main says end-of-text (51) instead of 9.
    steps = (step((), 0, 1), step((2, 3, 9), 2, 51))
    base = run("generate", text="ask not what", token_ids=(1, 2, 3), time_s=2.0, n_main_forwards=5)
    spec = dataclasses.replace(
        base, engine="specwhisper", time_s=1.0, n_main_forwards=2, n_draft_tokens=3, n_accepted=2
    )
    spec = dataclasses.replace(spec, steps=steps)
    numbers = dict(predicted_speedup=2.4, predicted_end_to_end=1.8, cost_ratio=0.1)
    return changed(api_result(base, spec, ((2.1, 2.0, 1.9), (1.0, 1.1, 0.9)), **numbers), changes)


# The text of every token id in synthetic_result, end-of-text included.
PIECES = {50: "<|startoftranscript|>", 1: "ask", 2: " not", 3: " what", 9: " who", 7: " your"}
PIECES[51] = "<|endoftext|>"
