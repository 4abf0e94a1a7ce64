"""The page with the Hub unreachable and HF_HUB_OFFLINE unset, as a fresh clone's quickstart
meets it where the Hub is blocked: HF_ENDPOINT is a closed loopback port, so the start-up check
finds no Hub. In real Chromium: the dropdowns offer local folders and the one Hub checkpoint in
the local cache, no other Hub id; picking that cached checkpoint, whose weights turn out broken,
gives a sentence with no server path, and the default pair preloaded at start-up stays loaded.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
from conftest import served  # noqa: E402
from playwright.sync_api import Browser, Page, expect  # noqa: E402
from test_browser import (  # noqa: E402
    ARTIFACTS,
    CHROMIUM,
    DESKTOP,
    JFK,
    PAGE_TIMEOUT_MS,
    RUN_TIMEOUT_MS,
    audio_block,
    choose,
    compare_button,
)
from test_loading import seed_hub_cache  # noqa: E402

from specwhisper import compare, hub, loading, request_check  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLOSED = "http://127.0.0.1:9"  # loopback, nothing listening: the Hub "unreachable"
CACHED = "openai/whisper-small"  # in the local cache, with weights that do not load
MAIN_LABEL = "Main model (the one you want)"
ASSISTANT_LABEL = "Assistant (drafts tokens; same tokenizer as the main)"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium at /usr/bin/chromium or on PATH"),
    pytest.mark.usefixtures("one_torch_thread"),
]


@dataclass(frozen=True)
class Server:
    url: str
    hub_cache: Path
    default: tuple[str, str]  # the pair preloaded at start-up
    loaded: tuple[loading.Loaded, loading.Loaded]  # what the preload put in the model cache


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[Server]:
    real = Path(os.environ.get("SPECWHISPER_MODELS", ROOT / "models")).resolve()
    is_real = (real / "whisper-base" / "model.safetensors").is_file()
    folder = real if is_real else request.getfixturevalue("app_models")
    hub_cache = tmp_path_factory.mktemp("hf-cache")
    weights = tmp_path_factory.mktemp("broken-whisper-small")
    shutil.copy(folder / ("whisper-base" if is_real else "tiny-random-a") / "config.json", weights)
    (weights / "model.safetensors").write_bytes(b"these are not safetensors")
    seed_hub_cache(hub_cache, CACHED, weights)
    with pytest.MonkeyPatch.context() as env:
        for name in ("HF_HUB_OFFLINE", "SPECWHISPER_OFFLINE"):
            env.delenv(name, raising=False)
        env.setenv("HF_ENDPOINT", CLOSED)
        env.setenv("HF_HUB_CACHE", str(hub_cache))
        env.setenv("SPECWHISPER_MODELS", str(folder))
        hub.forget_hub_check()
        from specwhisper.ui import build_demo, launch_options, preload_default_pair
        from specwhisper.ui.choices import default_pair

        demo = build_demo()  # asks the Hub once, here
        preload_default_pair()  # as `python app.py` does
        main, assistant = default_pair()
        loaded = compare.load_pair(request_check.CompareRequest(main=main, assistant=assistant))
        try:
            with served(demo, **launch_options()) as url:
                yield Server(url, hub_cache, (main, assistant), loaded[:2])
        finally:
            hub.forget_hub_check()


@pytest.fixture
def page(browser: Browser, server: Server, request: pytest.FixtureRequest) -> Iterator[Page]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    page = context.new_page()
    page.goto(server.url)
    expect(compare_button(page)).to_be_enabled()
    yield page
    page.screenshot(path=ARTIFACTS / f"{request.node.name}.png", full_page=True)
    context.close()


def options(page: Page, label: str) -> list[str]:
    """The choices a dropdown offers, as the visitor sees them when it opens."""
    page.get_by_label(label, exact=True).click()
    listed = page.get_by_role("option")
    expect(listed.first).to_be_visible()
    names = [n.strip().splitlines()[-1].strip() for n in listed.all_inner_texts()]  # no "✓"
    page.keyboard.press("Escape")
    expect(listed).to_have_count(0)  # closed again
    return names


def test_no_uncached_hub_checkpoint_is_offered(page, server):
    expect(page.get_by_text("The Hugging Face Hub did not answer", exact=True)).to_be_visible()
    mains = options(page, MAIN_LABEL)
    assert CACHED in mains
    assert all(m.endswith(" (local)") or m == CACHED for m in mains), mains
    assert server.default[0] in mains
    assistants = options(page, ASSISTANT_LABEL)  # for the default main
    assert server.default[1] in assistants
    hub_ids = [a for a in assistants if "/" in a]
    assert set(hub_ids) <= {CACHED}, f"uncached Hub ids are offered: {assistants}"


def test_a_failing_pick_leaves_the_default_pair_loaded(page, server):
    choose(page, MAIN_LABEL, CACHED)
    choose(page, ASSISTANT_LABEL, "self-int8")
    audio_block(page).locator("input[type=file]").set_input_files(JFK)
    expect(audio_block(page).get_by_role("button", name="Clear")).to_be_visible()
    compare_button(page).click()

    sentence = page.get_by_text(re.compile(f"Could not load the Hub checkpoint '{CACHED}'"))
    expect(sentence.first).to_be_visible(timeout=RUN_TIMEOUT_MS)
    body = page.locator("body").inner_text()
    assert str(server.hub_cache) not in body and "Traceback" not in body
    expect(compare_button(page)).to_be_enabled()

    main, assistant = server.default
    again = compare.load_pair(request_check.CompareRequest(main=main, assistant=assistant))
    assert again == (*server.loaded, 0.0), "the default pair was evicted by the failing pick"
