"""The result in forms to take away: a Markdown table to paste into a post, and the JSON as a
file to download."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import threading
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specwhisper.ui.verdict import encoder_of

MARKDOWN_COLUMNS = [
    "Main",
    "Assistant",
    "Device",
    "dtype",
    "Baseline",
    "Speculative",
    "Speed-up",
    "Acceptance",
    "Identical",
]


def markdown_table(result: Mapping[str, Any]) -> str:
    """The run as a Markdown table to paste into a post."""
    spec = result["speculative"]
    encoder = encoder_of(result)
    row = [
        result["main"],
        result["assistant"],
        result["device"],
        result["dtype"] + (f" (encoder {encoder})" if encoder != result["dtype"] else ""),
        f"{result['baseline']['time_s']:.3f} s",
        f"{spec['time_s']:.3f} s",
        f"{result['speedup']:.2f}×",
        f"{100 * spec['acceptance_rate']:.1f}%",
        "yes" if result["identical"] else f"no (from token {result['first_divergence']})",
    ]
    cells = [str(c).replace("|", "\\|") for c in row]
    return "\n".join(
        [
            "| " + " | ".join(MARKDOWN_COLUMNS) + " |",
            "|" + "---|" * len(MARKDOWN_COLUMNS),
            "| " + " | ".join(cells) + " |",
            "",
            f"{result['timing'].capitalize()}; {result['duration_s']:.1f} s of audio; engine "
            f"{result['engine']}; mean γ {result['mean_gamma']:.1f}; predicted speed-up "
            f"{result['predicted_end_to_end']:.2f}× end to end "
            f"({result['predicted_speedup']:.2f}× for the decoding loop).",
        ]
    )


class JsonFiles:
    """Downloadable JSON files in one private folder, keeping only the newest few (gradio
    copies each into its own cache when it serves it)."""

    def __init__(self, keep: int = 16):
        self._files: deque[Path] = deque()
        self._keep = keep
        self._lock = threading.Lock()
        self._folder: Path | None = None

    def write(self, result: Mapping[str, Any]) -> str:
        """`result` as a new JSON file; its path. The oldest file beyond `keep` is deleted."""
        with self._lock:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="specwhisper-json-"))
                atexit.register(shutil.rmtree, self._folder, ignore_errors=True)
            with tempfile.NamedTemporaryFile(
                "w", dir=self._folder, prefix="specwhisper-", suffix=".json", delete=False
            ) as file:
                json.dump(result, file, indent=1)
            self._files.append(Path(file.name))
            while len(self._files) > self._keep:
                self._files.popleft().unlink(missing_ok=True)
            return file.name


write_json = JsonFiles().write
