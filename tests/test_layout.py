"""The page's layout: every view Compare draws lands in the component of its name."""

from __future__ import annotations

import dataclasses

import gradio as gr

from specwhisper.ui.handlers import EMPTY, Shown, failed, on_start
from specwhisper.ui.layout import Results, results_section


def test_the_outputs_are_the_shown_fields_by_name():
    with gr.Blocks():
        results = results_section()
    components = [f.name for f in dataclasses.fields(Results)]
    outputs = results.outputs()

    assert len(outputs) == len(Shown._fields)
    # every output is the component named by its Shown field, and each is a different one
    assert outputs == [getattr(results, name) for name in Shown._fields]
    assert len({id(c) for c in outputs}) == len(outputs)
    assert set(components) - set(Shown._fields) == {"reference_text"}  # filled on clip change
    assert set(Shown._fields) - set(components) == set()


def test_an_emptied_page_has_a_value_for_every_output():
    assert set(EMPTY) == set(Shown._fields) - {"estimate", "verdict"}
    for shown in (on_start(), failed("The file contains text, not audio.")):
        assert len(shown) == len(Shown._fields)
