"""Sharing a result, in a real browser: the deep link reopens the page with the result shown,
and the `<gradio-app>` embed code from the page runs the app inside another web page.

The app, the browser and the page helpers are test_browser's (real whisper-tiny.en with its
int8 self as assistant and one timed repeat; the tiny random checkpoints without the offline
weights). The page that embeds the app is served from loopback by Python's http.server; the
embed's script comes from the app's own server, so nothing outside this machine is needed.
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
from playwright.sync_api import Page, expect  # noqa: E402
from test_browser import (  # noqa: E402
    ARTIFACTS,
    CHROMIUM,
    DESKTOP,
    JFK,
    PAGE_TIMEOUT_MS,
    audio_block,
    check_both_columns,
    choose_fast_settings,
    compare_button,
    open_page,
    press_compare_and_wait,
    server,
)

from specwhisper.ui.share import EMBED_LABEL  # noqa: E402

__all__ = ["open_page", "server"]  # the fixtures this module uses from test_browser

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium at /usr/bin/chromium or on PATH"),
    pytest.mark.usefixtures("one_torch_thread"),
]


def run_a_comparison(page: Page, server) -> tuple[str, str]:
    """The fast settings, the JFK clip uploaded, Compare; both transcripts."""
    choose_fast_settings(page, server)
    audio_block(page).locator("input[type=file]").set_input_files(JFK)
    reference = page.get_by_label("Reference (what is said in the example clip)")
    expect(reference).to_have_value(re.compile("fellow Americans"))  # the upload arrived
    press_compare_and_wait(page)
    return check_both_columns(page)


def open_share(page: Page) -> None:
    page.get_by_text("Share this result", exact=True).click()


def test_deep_link_reopens_the_result(open_page, server, browser):
    page = open_page(permissions=["clipboard-read", "clipboard-write"])
    transcripts = run_a_comparison(page, server)
    open_share(page)
    with page.expect_response(lambda r: "gradio_api/deep_link" in r.url) as saved:
        page.get_by_role("button", name="Copy a link to this result").click()
    assert saved.value.ok
    expect(page.get_by_role("button", name="Link copied")).to_be_visible()
    link = page.evaluate("navigator.clipboard.readText()")
    assert "?deep_link=" in link and link.startswith(server.url)

    # A visitor who never ran anything opens the link: the result is there, and the inputs.
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    shared = context.new_page()
    try:
        shared.goto(link)
        expect(shared.get_by_text("IDENTICAL", exact=True)).to_be_visible()
        assert check_both_columns(shared) == transcripts
        main = shared.get_by_label("Main model (the one you want)", exact=True)
        expect(main).to_have_value(server.main)
        shared.get_by_text("The audio: what Whisper reads, and the segments", exact=True).click()
        spectrogram = shared.locator(".block").filter(has=shared.locator("img[alt]"))
        expect(spectrogram.locator("img").first).to_be_visible()  # the figure, with its strip
        expect(compare_button(shared)).to_be_enabled()  # and it can run again from there
    finally:
        shared.screenshot(path=ARTIFACTS / "test_deep_link_opened.png", full_page=True)
        context.close()


@pytest.fixture
def static_site(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served over http on loopback: (folder, its URL)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as site:
        thread = threading.Thread(target=site.serve_forever, daemon=True)
        thread.start()
        try:
            yield tmp_path, f"http://127.0.0.1:{site.server_address[1]}/"
        finally:
            site.shutdown()


def test_embed_code_runs_the_first_example_in_another_page(open_page, server, static_site):
    page = open_page()
    open_share(page)
    embed_block = page.locator(".block").filter(has_text=EMBED_LABEL)
    code = embed_block.locator(".cm-content")
    expect(code).to_contain_text(f'<gradio-app src="{server.url.rstrip("/")}">')
    embed = code.inner_text()

    folder, url = static_site
    (folder / "post.html").write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>A blog post</title></head>"
        f"<body><h1>A blog post</h1><p>Try it here:</p>\n{embed}\n</body></html>",
        encoding="utf-8",
    )
    post = page.context.new_page()
    try:
        post.goto(url + "post.html")
        expect(post.get_by_role("heading", name="A blog post")).to_be_visible()
        expect(compare_button(post)).to_be_enabled()  # the app came up inside the post
        choose_fast_settings(post, server)
        # the example buttons are named "language · duration · “first words”"
        post.get_by_role("button", name=re.compile(r" · .*“")).first.click()
        reference = post.get_by_label("Reference (what is said in the example clip)")
        expect(reference).not_to_have_value("")  # the first example is loaded
        press_compare_and_wait(post)
        check_both_columns(post)
    finally:
        post.screenshot(path=ARTIFACTS / "test_embed_post.png", full_page=True)
        post.close()
