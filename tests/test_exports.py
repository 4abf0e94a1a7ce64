"""The exports: the Markdown table to paste, and the JSON download's files."""

from __future__ import annotations

from pathlib import Path

from results import synthetic_result

from specwhisper.ui.exports import JsonFiles, markdown_table


def test_markdown_table_for_bloggers():
    table = markdown_table(synthetic_result(main="a|b"))
    lines = table.splitlines()
    assert lines[0].startswith("| Main | Assistant | Device | dtype | Baseline | Speculative |")
    assert lines[2].count(" | ") == lines[0].count(" | ")  # the pipe in a name is escaped
    assert "a\\|b" in lines[2] and "2.000 s" in lines[2] and "1.000 s" in lines[2]
    assert "| 2.00× | 66.7% | yes |" in lines[2]
    assert "| float32 |" in lines[2]  # no encoder note where the main is all one precision
    assert "Median of 3 after warm-up" in table


def test_json_download_keeps_only_the_newest_files():
    files = JsonFiles(keep=3)
    paths = [Path(files.write(synthetic_result())) for _ in range(5)]
    assert [p.exists() for p in paths] == [False, False, True, True, True]
