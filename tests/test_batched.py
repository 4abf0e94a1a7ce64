"""Batched speculative decoding equals the batched baseline, row for row, on tiny random Whisper
models: every assistant kind, batch sizes 1, 2 and 5, rows that end at very different lengths,
and a batch where one row accepts every draft token while another rejects every one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specwhisper import batch_loop, batch_mode, checkpoints, drafters, int8_forward, loading
from specwhisper.audio import chunks
from specwhisper.loop import step_tokens
from specwhisper.request_check import CompareError

ASSISTANTS = ["tiny-ending", "tiny-random-b", "tiny-random-decoder", checkpoints.SELF_INT8]


@pytest.fixture(scope="module")
def pair(tiny_models, tmp_path_factory):
    """A main whose rows end after 1 to 100+ tokens, and every kind of assistant."""
    import tiny

    folder = tiny.save_tiny_checkpoint(
        tmp_path_factory.mktemp("ending") / "tiny-ending", seed=0, ending=True
    )
    cache = loading.ModelCache(capacity=8)
    cpu, fp32 = torch.device("cpu"), torch.float32

    def load(path) -> loading.Loaded:
        return cache.get(checkpoints._local_checkpoint(path), cpu, fp32)

    main = load(folder)
    drafts = {"tiny-ending": main}
    drafts |= {name: load(tiny_models / name) for name in ("tiny-random-b", "tiny-random-decoder")}
    drafts[checkpoints.SELF_INT8] = drafters.self_int8(main, cache)
    return main, drafts


def _clips(n: int, seed: int = 1234) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal(int(16_000 * rng.uniform(0.5, 8))) * rng.uniform(0.05, 0.5)).astype(
            np.float32
        )
        for _ in range(n)
    ]


def _features(main: loading.Loaded, n: int) -> batch_loop.BatchFeatures:
    return batch_loop.prepare_batch(main, _clips(n), ["en"] * n)


@pytest.mark.parametrize("batch_size", [1, 2, 5])
@pytest.mark.parametrize("assistant", ASSISTANTS)
def test_batched_speculative_equals_the_batched_baseline_row_for_row(pair, assistant, batch_size):
    main, drafts = pair
    features = _features(main, batch_size)
    baseline = batch_loop.decode_batch_baseline(main, features, max_new_tokens=60)
    speculative = batch_loop.decode_batch_speculative(
        main, drafts[assistant], features, gamma=4, max_new_tokens=60
    )
    assert speculative.token_ids == baseline.token_ids
    assert speculative.texts == baseline.texts
    assert speculative.batch_size == batch_size
    # the steps replay each row
    for row, steps in zip(speculative.token_ids, speculative.steps, strict=True):
        replay = [t for s in steps for t in step_tokens(s)]
        assert tuple(replay[: len(row)]) == row
    if assistant == "tiny-ending":  # the main drafting for itself: every draft token kept
        assert speculative.acceptance_rate == 1.0
        assert speculative.n_main_forwards < baseline.n_main_forwards


def test_rows_that_end_at_very_different_lengths(pair):
    main, drafts = pair
    features = _features(main, 8)
    baseline = batch_loop.decode_batch_baseline(main, features, max_new_tokens=120)
    lengths = [len(t) for t in baseline.token_ids]
    assert min(lengths) <= 3 and max(lengths) >= 30  # the batch really is ragged
    for assistant in ("tiny-ending", checkpoints.SELF_INT8):
        options = dict(gamma=5, gamma_schedule="constant", max_new_tokens=120)
        speculative = batch_loop.decode_batch_speculative(
            main, drafts[assistant], features, **options
        )
        assert speculative.token_ids == baseline.token_ids
        # a finished row leaves the batch: it takes no step after its last token
        for row, steps in zip(speculative.token_ids, speculative.steps, strict=True):
            assert sum(len(step_tokens(s)) for s in steps) <= len(row) + 1


class _Scripted:
    """A batched drafter that proposes the baseline's own next tokens for the rows in `right`
    and a wrong token (the right one with its lowest bit flipped) for every other row."""

    def __init__(self, truth: list[tuple[int, ...]], right: set[int]):
        self.truth, self.right = truth, right
        self.rows = list(range(len(truth)))  # original row of each batch row
        self.n_prompt: dict[int, int] = {}

    def propose(self, tokens: list[list[int]], n: list[int]) -> list[list[int]]:
        out = []
        for row, seq, want in zip(self.rows, tokens, n, strict=True):
            start = len(seq) - self.n_prompt.setdefault(row, len(seq) - 1)
            proposal = list(self.truth[row][start : start + want])
            out.append(proposal if row in self.right else [t ^ 1 for t in proposal])
        return out

    def accept(self, n_valid: list[int]) -> None:
        pass

    def keep_rows(self, rows: list[int]) -> None:
        self.rows = [self.rows[i] for i in rows]


def test_one_row_accepts_everything_while_another_rejects_everything(pair, monkeypatch):
    main, drafts = pair
    features = batch_loop.prepare_batch(main, _clips(4, seed=7), ["en"] * 4)
    baseline = batch_loop.decode_batch_baseline(main, features, max_new_tokens=40)
    eos = main.model.generation_config.eos_token_id
    truth = [(*row, eos) for row in baseline.token_ids]
    monkeypatch.setattr(batch_loop, "BatchDrafter", lambda *a, **k: _Scripted(truth, {0, 2}))
    speculative = batch_loop.decode_batch_speculative(
        main, drafts["tiny-ending"], features, gamma=3, gamma_schedule="constant", max_new_tokens=40
    )
    assert speculative.token_ids == baseline.token_ids
    for row, steps in enumerate(speculative.steps):
        drafted = sum(len(s.drafted) for s in steps)
        kept = sum(s.n_accepted for s in steps)
        if drafted:
            assert kept == (drafted if row in (0, 2) else 0)


def test_ragged_decoder_matches_one_row_at_a_time(pair):
    """Rows fed different numbers of tokens in one pass give each row the hidden states a
    batch-of-one pass gives it."""
    main, _ = pair
    decoder = main.model.model.decoder
    states = torch.randn(3, 1500, 64)
    rows = [[5, 6, 7], [9], [11, 12]]
    with torch.inference_mode():
        ragged = batch_loop.RaggedDecoder(decoder, batch_loop.empty_cache(), states, 448)
        ragged.feed([[1, 2], [1, 2, 3, 4], [1]])
        ragged.truncate([2, 3, 1])  # row 1 rejects its last token
        hidden = ragged.feed(rows)
        for b, (before, row) in enumerate(zip([[1, 2], [1, 2, 3], [1]], rows, strict=True)):
            one = decoder(
                input_ids=torch.tensor([before + row]), encoder_hidden_states=states[b : b + 1]
            ).last_hidden_state[0, len(before) :]
            torch.testing.assert_close(hidden[b, : len(row)], one, rtol=1e-4, atol=1e-4)


def test_batch_mode_takes_windows_of_up_to_30_s(pair):
    main, _ = pair
    with pytest.raises(ValueError, match="30 s"):
        batch_loop.prepare_batch(main, [np.zeros(16_000 * 31, dtype=np.float32)])
    with pytest.raises(ValueError, match="at least one clip"):
        batch_loop.prepare_batch(main, [])


@pytest.mark.parametrize("cross", ["fp32", "bf16"])
@pytest.mark.parametrize("rows", [[0], [0, 1, 2]])
def test_batched_int8_draft_computes_the_batch_of_one_draft(pair, rows, cross, monkeypatch):
    """The batched lean int8 draft gives each row the logits the batch-of-one lean draft gives
    it, rows at different positions and fed different numbers of tokens.

    fbgemm's dynamic int8 matmul takes one activation scale for all its input rows, so in a
    batch each row's rounding depends on the others (and on pads): a real, small difference
    for a draft, which the main verifies anyway. To compare the kernels themselves, both sides
    here quantize each input row on its own."""
    main, drafts = pair
    fused = int8_forward.int8_linear

    def row_by_row(x, weight, reduce_range=True):
        return torch.cat([fused(x[i : i + 1], weight, reduce_range) for i in range(len(x))])

    monkeypatch.setattr(int8_forward, "int8_linear", row_by_row)
    monkeypatch.setenv("SPECWHISPER_DRAFT_CROSS", cross)  # both sides keep the same copy
    suppress, eos = drafters.draft_vocabulary(main)
    torch.manual_seed(0)
    states = torch.randn(3, 1500, 64)[rows]
    before = [[1, 2, 3], [1, 2, 3, 4, 5], [1]]
    kept = [2, 5, 1]  # row 0 forgets its last token
    after = [[7, 8], [9], []]
    with torch.inference_mode():
        cache = batch_loop.empty_cache()  # the main's, after a pass: its cross-attention K/V
        ids = torch.tensor([[1]] * len(rows))
        main.model.model.decoder(input_ids=ids, encoder_hidden_states=states, past_key_values=cache)
        draft = drafts[checkpoints.SELF_INT8]
        together = batch_loop.Int8BatchDrafter(draft, suppress, eos, states, None, cache)
        first = together.next_logits([before[r] for r in rows])
        together.accept([kept[r] for r in rows])
        second = together.next_logits([after[r] for r in rows])
        for i, r in enumerate(rows[:2]):
            one_cache = batch_loop.empty_cache()
            one = states[i : i + 1]
            main.model.model.decoder(
                input_ids=ids[:1], encoder_hidden_states=one, past_key_values=one_cache
            )
            alone = drafters.Int8SelfDrafter(draft, suppress, eos)
            alone.begin(one, one_cache, None)
            close = dict(rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(first[i], alone.next_logits(before[r]), **close)
            alone.accept(kept[r])
            if after[r]:
                torch.testing.assert_close(second[i], alone.next_logits(after[r]), **close)


def test_schedule_pools_the_rows_of_a_batch():
    """One batched step: the acceptance counts pool the rows, the costs are the batch's (the
    draft's per token over the longest row's draft, the verify pass keyed by its width)."""
    from specwhisper.schedule import GammaSchedule

    schedule = GammaSchedule(accepted=0.0, trials=0.0, decay=1.0)
    schedule.update_batch([5, 3, 0], [5, 1, 0], draft_s=0.5, verify_s=0.2)
    assert (schedule.accepted, schedule.trials) == (6.0, 7.0)  # 5 of 5, then 1 + one rejection
    assert schedule.t_verify_s == {6: 0.2}
    schedule.update_batch([4, 4], [4, 4], draft_s=0.4, verify_s=0.3)
    assert schedule.t_draft_s == pytest.approx(0.1)  # the second drafting step: 0.4 s / 4


# --- batch mode: rows, sizes, the sweep and stitching -----------------------------------------


def test_recordings_are_cut_into_rows_named_one_way():
    long, short = np.zeros(16_000 * 65, dtype=np.float32), np.zeros(16_000 * 5, dtype=np.float32)
    rows = batch_mode.cut_rows([("long.wav", long, "en"), ("short.wav", short, None)])
    assert rows.names == ("long.wav #1", "long.wav #2", "long.wav #3", "short.wav")
    assert rows.languages == ("en", "en", "en", None)
    assert [r.rows for r in rows.recordings] == [range(0, 3), range(3, 4)]
    cut = chunks(long)  # the ASR pipeline's pieces, strides too
    assert rows.recordings[0].strides == tuple(stride for _, stride in cut)
    assert all(np.array_equal(a, b) for a, (b, _) in zip(rows.samples, cut, strict=False))
    assert rows.duration_s == pytest.approx(sum(len(p) for p, _ in cut) / 16_000 + 5)


def test_batch_sizes_are_checked_in_one_place():
    assert batch_mode.check_batch_sizes(["4", 1, 2, 2]) == (1, 2, 4)
    for sizes, message in [([], "at least one"), ([0, 2], "from 1 to 64"), ([65], "1 to 64")]:
        with pytest.raises(batch_mode.BatchError, match=message):
            batch_mode.check_batch_sizes(sizes)
    with pytest.raises(batch_mode.BatchError, match="whole numbers"):
        batch_mode.check_batch_sizes(["x"])
    assert issubclass(batch_mode.BatchError, CompareError)  # the page shows its sentence as is


def test_sweep_reuses_batch_size_one_and_stitches_recordings(pair, monkeypatch):
    """Sizes run ascending; size 1's baselines are every row's batch of one, so a larger size
    runs no extra batch of one; a recording cut into rows is stitched back on both sides."""
    main, drafts = pair
    rng = np.random.default_rng(3)
    long = (rng.standard_normal(16_000 * 65) * 0.1).astype(np.float32)
    recordings = [("long.wav", long, "en"), *((f"c{i}", c, "en") for i, c in enumerate(_clips(2)))]
    rows = batch_mode.cut_rows(recordings)
    calls: list[tuple[int, int]] = []  # (batch size being compared, rows in the call)
    size_now = [0]
    decode_baseline = batch_mode.decode_batch_baseline

    def counted(main, features, max_new_tokens=None):
        calls.append((size_now[0], features.input_features.shape[0]))
        return decode_baseline(main, features, max_new_tokens)

    def on_batch(size: int, i: int, n: int) -> None:
        size_now[0] = size

    monkeypatch.setattr(batch_mode, "decode_batch_baseline", counted)
    options = dict(repeats=1, warmup=0, max_new_tokens=20, on_batch=on_batch)
    results = list(batch_mode.sweep(main, drafts[checkpoints.SELF_INT8], rows, [2, 1], **options))
    assert [r.batch_size for r in results] == [1, 2]
    assert [n for size, n in calls if size == 2] == [2, 2, 1]  # no batch of one re-run
    assert results[0].batch_of_one_tally is None
    assert results[1].batch_of_one_tally == "5/5"
    assert all(r.n_identical_rows == 5 for r in results)
    entry = results[1].to_dict(rows.names)
    assert (entry["n_rows"], entry["n_identical_rows"]) == (5, 5)
    assert entry["n_main_forwards"]["speculative"] < entry["n_main_forwards"]["baseline"]
    assert entry["batched_baseline_equals_batch_of_one"] == "5/5"
    assert [row["clip"] for row in entry["rows"]] == list(rows.names)
    shown = batch_mode.sweep_json(main, rows, results)
    assert [r["clip"] for r in shown["recordings"]] == ["long.wav"]
    stitched = shown["recordings"][0]
    assert stitched["identical"] and stitched["baseline_text"] == stitched["speculative_text"]
    pieces = [r.baseline_tokens for r in results[1].rows[:3]]
    expected = batch_mode.merge_pieces(main, pieces, rows.recordings[0].strides)
    assert stitched["baseline_text"] == expected
