"""The draft-token view: who produced each token, the table of steps, and token pieces named."""

from __future__ import annotations

from results import PIECES, synthetic_result

from specwhisper.ui.tokens import (
    ORIGINS,
    STEP_COLUMNS,
    draft_tokens,
    result_token_ids,
    steps_frame,
    token_origins,
    token_pieces,
)


def test_token_origins_follow_the_steps():
    steps = [
        {"drafted": [], "n_accepted": 0, "main_token": 1},  # prefill: no draft
        {"drafted": [2, 3, 9], "n_accepted": 2, "main_token": 7},  # a correction
        {"drafted": [4, 5], "n_accepted": 2, "main_token": 6},  # all accepted: a bonus
        {"drafted": [], "n_accepted": 0, "main_token": 8},  # drafting paused
        # ended inside its accepted draft: end-of-text drafted and accepted, no main token
        {"drafted": [10, 51, 51], "n_accepted": 2, "main_token": None},
    ]
    origins = token_origins([1, 2, 3, 7, 4, 5, 6, 8, 10], steps)  # end-of-text left out
    assert origins == [
        (1, "main"),
        (2, "draft"),
        (3, "draft"),
        (7, "correction"),
        (4, "draft"),
        (5, "draft"),
        (6, "bonus"),
        (8, "main"),
        (10, "draft"),
    ]
    # At the length limit the output stops inside the accepted draft: no token of the main's.
    cut = [{"drafted": [], "n_accepted": 0, "main_token": 1}]
    cut.append({"drafted": [2, 3, 4], "n_accepted": 2, "main_token": None})
    assert token_origins([1, 2, 3], cut) == [(1, "main"), (2, "draft"), (3, "draft")]


def test_draft_token_view_labels_tokens_and_lists_steps():
    tokens = draft_tokens(synthetic_result(), PIECES)
    labels = {label for _, label in ORIGINS.values()}
    assert tokens == [
        ("ask", "main model: first token, or a step without a draft"),
        (" not", "accepted draft token"),
        (" what", "accepted draft token"),
    ]  # end-of-text, a special token, is not part of the transcript
    assert {label for _, label in tokens} <= labels

    steps = synthetic_result()["speculative"]["steps"]
    steps.append({"drafted": [7, 51], "n_accepted": 2, "main_token": None})
    frame = steps_frame(synthetic_result(speculative={"steps": steps}), PIECES)
    assert list(frame.columns) == STEP_COLUMNS
    first, second, third = frame.to_dict("records")
    assert first["Accepted"] == "0/0" and first["Main token"] == '"ask"'
    assert first["Why"].startswith("no draft")
    assert second["Accepted"] == "2/3"
    assert second["Accepted draft"] == '" not" " what"' and second["Rejected draft"] == '" who"'
    assert second["Main token"] == '"<|endoftext|>"' and second["Why"].startswith("correction")
    assert third["Main token"] == "" and third["Why"].startswith("none: the step ended inside")
    ids = result_token_ids(synthetic_result(speculative={"steps": steps}))
    assert None not in ids and {1, 2, 3, 7, 9, 51} <= ids  # every token the view names


def test_token_pieces_name_special_tokens(app_models):
    from transformers import WhisperTokenizerFast

    tokenizer = WhisperTokenizerFast.from_pretrained(app_models / "tiny-random-a")
    eot, sot = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|startoftranscript|>"])
    timestamp = tokenizer.convert_tokens_to_ids("<|1.00|>")
    [letter] = tokenizer.encode("a", add_special_tokens=False)
    pieces = token_pieces(tokenizer, [eot, sot, timestamp, letter])
    assert pieces == {
        eot: "<|endoftext|>",
        sot: "<|startoftranscript|>",
        timestamp: "<|1.00|>",
        letter: "a",
    }
