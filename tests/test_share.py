"""The share section's addresses and embed code, without a browser (test_browser_share.py
opens them in one)."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from specwhisper.ui.share import app_url, embed_code, embed_for_request, frontend_entry


def test_app_url_is_the_spaces_own_or_the_pages():
    assert app_url("someone/specwhisper", "http://10.0.0.2:7860/") == (
        "https://someone-specwhisper.hf.space"
    )
    assert app_url("Some_One/spec.Whisper", "") == "https://some-one-spec-whisper.hf.space"
    assert app_url(None, "http://127.0.0.1:7860/") == "http://127.0.0.1:7860"
    assert app_url("", "http://localhost:8000/") == "http://localhost:8000"


def test_embed_code_loads_the_front_end_the_server_serves():
    entry = frontend_entry()
    # the server serves /assets/* from the package's frontend folder (gradio's BUILD_PATH_LIB)
    assert (Path(gr.__file__).parent / "templates" / "frontend" / entry).is_file()
    assert embed_code("https://someone-specwhisper.hf.space") == (
        f'<script type="module" src="https://someone-specwhisper.hf.space/{entry}"></script>\n'
        '<gradio-app src="https://someone-specwhisper.hf.space"></gradio-app>'
    )


def test_embed_code_before_the_page_loads(monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert embed_for_request() == ""  # the page load writes it, for the address reached
    monkeypatch.setenv("SPACE_ID", "someone/specwhisper")
    assert 'src="https://someone-specwhisper.hf.space"' in embed_for_request()
