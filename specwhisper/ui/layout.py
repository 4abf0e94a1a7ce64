"""The page, composed from its sections: the form (form.py), the results, batch mode and the
hidden `compare` endpoint, each built by a function that returns its components; then the
events that join them to the handlers. Layout and wiring only: no rendering, no decoding."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from specwhisper.ui import texts
from specwhisper.ui.api import accept_short_calls, api_components
from specwhisper.ui.batch_mode import BATCH_COLUMNS, on_batch
from specwhisper.ui.choices import examples, form_start, on_main_change, reference_for
from specwhisper.ui.form import Form, form_section
from specwhisper.ui.handlers import Shown, on_compare, on_estimate, on_start, run_compare
from specwhisper.ui.hardware import missing_gpu_notice
from specwhisper.ui.share import share_section
from specwhisper.ui.startup import skip_queue_analytics
from specwhisper.ui.stopping import stops_when_gone
from specwhisper.ui.tokens import ORIGINS, STEP_COLUMN_WIDTHS, STEP_COLUMNS


def build_demo() -> gr.Blocks:
    """The page and its one public endpoint, `compare`; the queue is configured here too."""
    start = form_start()
    with gr.Blocks(title="specwhisper", delete_cache=(1800, 3600)) as demo:
        gr.Markdown(texts.HEADER)
        no_gpu = missing_gpu_notice()  # a Space's GPU that torch cannot use
        gr.Markdown(no_gpu, visible=bool(no_gpu), elem_id="no-gpu")
        gr.Markdown(start.notice, visible=bool(start.notice))
        form = form_section(start, examples())
        results = results_section()
        share_section(demo)
        batch = batch_section(enabled=bool(start.mains))
        api = api_section(start.main or "", start.assistant)
        _wire(form, results, batch, api)
    skip_queue_analytics()
    demo.queue(max_size=32, default_concurrency_limit=4)
    accept_short_calls(demo)
    return demo


@dataclass(frozen=True)
class Results:
    """What the Compare button fills in, one component per handlers.Shown field of the same name,
    and the example's reference text (filled when the clip changes, not by Compare)."""

    estimate: gr.Markdown
    verdict: gr.HTML
    reference_text: gr.Textbox
    baseline: gr.HTML
    speculative: gr.HTML
    spectrogram: gr.Plot
    token_view: gr.Accordion
    origins: gr.HighlightedText
    steps: gr.Dataframe
    snippet: gr.Code
    markdown: gr.Code
    json_file: gr.File
    reference_box: gr.Column  # faster-whisper's column, shown when asked for
    reference: gr.HTML

    def outputs(self) -> list[gr.Component]:
        """on_compare's outputs: the component named by each Shown field, in Shown's order."""
        return [getattr(self, name) for name in Shown._fields]


def results_section() -> Results:
    """How long a run takes, the verdict (where the one progress bar shows), the reference, the
    two columns, then the views under them."""
    estimate = gr.Markdown(elem_id="estimate")
    # the one progress bar shows here, over handlers.RUNNING, while a run is under way
    verdict = gr.HTML(texts.VERDICT_PLACEHOLDER, elem_id="verdict")
    reference_text = gr.Textbox(
        label="Reference (what is said in the example clip)",
        interactive=False,
        lines=2,
        max_lines=8,
    )
    with gr.Row(equal_height=False):
        with gr.Column(min_width=300):
            baseline = gr.HTML()
        with gr.Column(min_width=300):
            speculative = gr.HTML()
        with gr.Column(min_width=300, visible=False) as reference_box:
            reference = gr.HTML()
    with gr.Accordion("The audio: what Whisper reads, and the segments", open=False):
        spectrogram = gr.Plot(show_label=False)
    # closed and empty until a result exists; on_compare opens it
    with gr.Accordion("Draft-token view: who produced each token", open=False) as token_view:
        origins, steps = _token_views()
    run_it = "Run it yourself: this run in plain transformers, then in specwhisper's loop"
    with gr.Accordion(run_it, open=False):
        snippet = gr.Code(language="python", label="Python", buttons=["copy"])
    with gr.Accordion("Results for bloggers", open=False):
        markdown, json_file = _exports()
    return Results(
        estimate=estimate,
        verdict=verdict,
        reference_text=reference_text,
        baseline=baseline,
        speculative=speculative,
        spectrogram=spectrogram,
        token_view=token_view,
        origins=origins,
        steps=steps,
        snippet=snippet,
        markdown=markdown,
        json_file=json_file,
        reference_box=reference_box,
        reference=reference,
    )


def _token_views() -> tuple[gr.HighlightedText, gr.Dataframe]:
    """The transcript coloured by who produced each token, and the table of steps."""
    origins = gr.HighlightedText(
        label="Speculative transcript, token by token",
        color_map={label: color for color, label in ORIGINS.values()},
        show_legend=True,
        show_inline_category=False,
    )
    steps = gr.Dataframe(
        headers=STEP_COLUMNS,
        label="Steps: what the assistant drafted and what the main model kept",
        interactive=False,
        wrap=True,
        max_height=420,
        # fixed widths in px, not shares of the page: at 390 px a share is a few letters wide
        # and the headers broke letter by letter; the table scrolls sideways instead
        column_widths=STEP_COLUMN_WIDTHS,
        elem_id="steps",
    )
    return origins, steps


def _exports() -> tuple[gr.Code, gr.File]:
    """The Markdown table to paste, and the JSON file to download."""
    markdown = gr.Code(
        language="markdown", label="Copy as Markdown", buttons=["copy"], wrap_lines=True
    )
    json_file = gr.File(label="Download the JSON")
    return markdown, json_file


@dataclass(frozen=True)
class Batch:
    """Batch mode's inputs, its button and its three outputs."""

    files: gr.File
    sizes: gr.CheckboxGroup
    repeats: gr.Slider
    run: gr.Button
    summary: gr.HTML
    chart: gr.LinePlot
    table: gr.Dataframe


def batch_section(enabled: bool) -> Batch:
    """Several files, batched baseline against batched speculative, in a closed accordion."""
    with gr.Accordion(
        "Batch mode: several files, batched baseline vs batched speculative", open=False
    ):
        gr.Markdown(texts.BATCH_INTRO)
        with gr.Row(equal_height=False):
            with gr.Column(min_width=300):
                files = gr.File(file_count="multiple", file_types=["audio"], label="Audio files")
            with gr.Column(min_width=300):
                sizes = gr.CheckboxGroup(
                    texts.BATCH_SIZES, value=[1, 4], label="Batch sizes to compare"
                )
                repeats = gr.Slider(1, 5, value=1, step=1, label="Timed repeats")
                run = gr.Button("Compare in batches", interactive=enabled)
        summary = gr.HTML()
        chart = gr.LinePlot(
            x="batch size",
            y="speed-up",
            color="series",
            title="Speed-up over the batched baseline",
            y_lim=[0, None],
        )
        table = gr.Dataframe(
            headers=BATCH_COLUMNS,
            label="Rows (largest batch size)",
            interactive=False,
            wrap=True,
            max_height=420,
        )
    return Batch(files, sizes, repeats, run, summary, chart, table)


@dataclass(frozen=True)
class Api:
    """The `compare` endpoint's hidden inputs (api.API_FIELDS), its output and its trigger."""

    inputs: list[gr.Component]
    output: gr.JSON
    button: gr.Button


def api_section(main: str, assistant: str) -> Api:
    """The public API: plain types in hidden components, so `audio` takes handle_file(...) and
    `language`/`main` take codes or any checkpoint id, not just the listed names."""
    with gr.Group(visible=False):
        inputs = api_components(main, assistant)
        output = gr.JSON(label="comparison")
        button = gr.Button()
    return Api(inputs, output, button)


def _wire(form: Form, results: Results, batch: Batch, api: Api) -> None:
    """The events. Timed runs (the API, Compare, Compare in batches) share one slot, so two
    requests never slow each other down; only `compare` is public."""
    timed = dict(concurrency_limit=1, concurrency_id="compare")
    # Each timed run stops between two model passes when its visitor cancels or leaves.
    run_compare_, on_compare_, on_batch_ = map(stops_when_gone, (run_compare, on_compare, on_batch))
    api.button.click(run_compare_, api.inputs, api.output, api_name="compare", **timed)
    form.run.click(
        on_start, None, results.outputs(), api_visibility="private", show_progress="hidden"
    ).then(
        on_compare_,
        [form.audio],
        results.outputs(),
        inputs_kwargs=form.settings(),
        api_visibility="private",
        show_progress_on=[results.verdict],  # one bar, where the result will be
        **timed,
    )
    for field in (form.audio, form.main, form.repeats):
        field.change(
            on_estimate,
            [form.audio, form.main, form.repeats],
            results.estimate,
            api_visibility="private",
            show_progress="hidden",
        )
    form.main.change(
        on_main_change,
        [form.main, form.language],
        [form.assistant, form.language, form.task, form.main_note],
        api_visibility="private",
    )
    form.audio.change(reference_for, form.audio, results.reference_text, api_visibility="private")
    batch.run.click(
        on_batch_,
        [batch.files, batch.sizes, batch.repeats, form.main, form.assistant, form.language],
        [batch.summary, batch.table, batch.chart],
        api_visibility="private",
        **timed,
    )
